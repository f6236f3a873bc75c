"""History across torch and transformers releases: release parsing, the environments'
names, a release that cannot be installed, skip reasons, steps against the host's drift,
the History pages, and the rest of the site reading the current release's runs."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.runner import InProcessMeasure
from support.runs import RUN, coverage_bench, scaled_copy

from reportgen.errors import UserError
from reportgen.records.load import load_runs
from reportgen.records.releases import ReleaseSet, parse_spec, release_sets, releases, resolve, run_base
from reportgen.records.schema import current_runs

TRANSFORMERS = ["5.25.0", "5.24.0", "5.23.0", "5.22.2", "5.22.1", "5.22.0", "5.21.1", "5.21.0",
                "5.20.2", "5.20.1", "5.20.0", "5.19.0", "5.2.0", "5.25.0rc1", "4.57.6"]
HW = "cpu-amd-epyc-2c"


# --- which releases ------------------------------------------------------------------------

def test_release_flags_parse_lists_and_last_n() -> None:
    assert parse_spec("last:6", "--releases") == 6
    assert parse_spec("5.15, 5.20.1,5.15", "--transformers") == ["5.15", "5.20.1"]
    assert parse_spec(None, "--torch") is None
    for bad, words in (("last:0", "N of 1 or more"), ("5.x", "'5.x' is not a release version"),
                       ("5.15,,5.20", "separated by commas"), ("", "separated by commas")):
        with pytest.raises(UserError, match="--transformers") as exc:
            parse_spec(bad, "--transformers")
        assert words in str(exc.value)


def test_last_n_takes_the_newest_patch_of_the_newest_minor_releases() -> None:
    assert releases(TRANSFORMERS)[-4:] == ["5.22.2", "5.23.0", "5.24.0", "5.25.0"]
    found, missing = resolve(6, TRANSFORMERS, "transformers")
    assert found == ["5.20.2", "5.21.1", "5.22.2", "5.23.0", "5.24.0", "5.25.0"] and missing == []
    # pre-releases never count; 5.2 is not 5.20
    assert "5.25.0rc1" not in releases(TRANSFORMERS)
    found, missing = resolve(["5.2", "5.20", "5.20.1", "5.99"], TRANSFORMERS, "transformers")
    assert found == ["5.2.0", "5.20.1", "5.20.2"]
    assert missing == ["transformers 5.99: no such release on the package index; skipped"]
    # without the index, exact versions go through as given; last:N cannot
    assert resolve(["2.13.0"], None, "torch") == (["2.13.0"], [])
    with pytest.raises(UserError, match="last:3 needs torch's releases"):
        resolve(3, None, "torch")


def test_release_sets_pair_every_torch_with_every_transformers_oldest_first() -> None:
    sets = release_sets(["2.14.1", "2.13.0"], ["5.20.2", "5.9.0"])
    assert [s.name for s in sets] == ["2.13.0-5.9.0", "2.13.0-5.20.2", "2.14.1-5.9.0", "2.14.1-5.20.2"]
    assert sets[0].label == "torch 2.13.0, transformers 5.9.0"
    assert run_base("history", "f949989f00", sets[0].as_dict()) == "history-f949989f-torch2.13.0-transformers5.9.0"


def test_the_cache_is_absolute_and_each_release_set_has_its_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.execute import history

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = history.default_cache()
    assert cache.is_absolute() and cache == (tmp_path / "xdg" / "reportgen" / "history").resolve()
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert history.default_cache() == (Path.home() / ".cache" / "reportgen" / "history").resolve()
    release = ReleaseSet("2.13.0", "5.20.2")
    assert history.release_env(cache, release) == cache / "2.13.0-5.20.2"
    assert history.torch_env(cache, "2.13.0") == cache / "torch-2.13.0"


def _args(**kw: Any) -> argparse.Namespace:
    base = {"torch": None, "transformers": None, "releases": None}
    return argparse.Namespace(**{**base, **kw})


def test_the_plan_asks_the_index_only_where_a_flag_needs_it() -> None:
    from reportgen.commands.history import plan

    asked: list[str] = []

    def index(package: str) -> list[str] | None:
        asked.append(package)
        return TRANSFORMERS if package == "transformers" else ["2.14.1", "2.13.0+cpu", "2.13.0"]

    sets, lines = plan(_args(torch="2.13.0", releases="last:2"), index=index)
    assert asked == ["transformers"]
    assert [s.name for s in sets] == ["2.13.0-5.24.0", "2.13.0-5.25.0"] and lines == []
    sets, _ = plan(_args(torch="2.13,2.14", transformers="5.25.0"), index=index)
    assert [s.name for s in sets] == ["2.13.0-5.25.0", "2.14.1-5.25.0"]
    with pytest.raises(UserError, match="--releases: the same as --transformers"):
        plan(_args(transformers="5.20", releases="last:2"), index=index)
    with pytest.raises(UserError, match="name the releases"):
        plan(_args(), index=index)


# --- installing ---------------------------------------------------------------------------

class FakePip:
    """Stands in for pip and venv: a venv is a directory; an install of a release in
    ``missing`` fails as pip says it does."""

    def __init__(self, missing: set[str]) -> None:
        self.missing = missing
        self.calls: list[list[str]] = []

    def __call__(self, argv: Any, timeout_s: float) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        if "venv" in argv:
            Path(argv[-1], "bin").mkdir(parents=True, exist_ok=True)
        for req in argv:
            if req in self.missing:
                return subprocess.CompletedProcess(argv, 1, "", (
                    f"ERROR: Could not find a version that satisfies the requirement {req}\n"
                    f"ERROR: No matching distribution found for {req}\n"))
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_a_release_that_cannot_be_installed_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.execute import history

    monkeypatch.setattr(history, "_versions", lambda python: {"torch": "2.13.0+cpu", "transformers": "5.20.2"})
    monkeypatch.setattr(history, "_imports", lambda python: None)
    pip = FakePip({"transformers==5.99.0"})
    with pytest.raises(history.InstallError) as exc:
        history.ensure_release(tmp_path, ReleaseSet("2.13.0", "5.99.0"), run=pip, log=lambda _: None)
    assert str(exc.value) == ("transformers 5.99.0: ERROR: Could not find a version that satisfies the "
                              "requirement transformers==5.99.0")
    assert not (tmp_path / "2.13.0-5.99.0").exists()  # the half-built one is never reused
    # the torch environment it built stays, and is reused by the next release set
    built = history.ensure_release(tmp_path, ReleaseSet("2.13.0", "5.20.2"), run=pip, log=lambda _: None)
    assert built.prefix == tmp_path / "2.13.0-5.20.2" and (built.prefix / history.READY).is_file()
    pth = history.site_packages(built.prefix) / history.PTH
    assert pth.read_text().strip() == str(history.site_packages(tmp_path / "torch-2.13.0"))
    torch_installs = [c for c in pip.calls if "--no-deps" in c]
    assert len(torch_installs) == 1 and "torch==2.13.0" in torch_installs[0]
    again = history.ensure_release(tmp_path, ReleaseSet("2.13.0", "5.20.2"), run=pip, log=lambda _: None)
    assert again.seconds is None  # reused, not rebuilt


def test_a_torch_build_that_needs_its_libraries_to_import_gets_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.execute import history

    reasons = ["ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory", None]
    monkeypatch.setattr(history, "_imports", lambda python: reasons.pop(0))
    monkeypatch.setattr(history, "_versions", lambda python: {"torch": "2.14.1", "transformers": None})
    pip, lines = FakePip(set()), []
    built = history.ensure_torch(tmp_path, "2.14.1", run=pip, log=lines.append)
    installs = [c[c.index("install"):] for c in pip.calls if "install" in c]
    assert "--no-deps" in installs[0] and "--no-deps" not in installs[-1] and "torch==2.14.1" in installs[-1]
    assert "torch 2.14.1 does not import without its dependencies (ImportError: libcudnn.so.9" in lines[-1]
    assert (built.prefix / history.READY).is_file()
    # one that does not import even then is one line, and nothing is marked ready
    monkeypatch.setattr(history, "_imports", lambda python: "ImportError: libcuda.so.1")
    with pytest.raises(history.InstallError, match="torch 2.13.0 does not import: ImportError: libcuda.so.1"):
        history.ensure_torch(tmp_path, "2.13.0", run=pip, log=lines.append)
    assert not (tmp_path / "torch-2.13.0").exists()


def test_a_failed_install_is_one_line_and_the_other_releases_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen.commands import history as command
    from reportgen.execute import history, runner
    from reportgen.suite import load_suite

    def ensure(cache: Path, release: ReleaseSet, **_: Any) -> history.Built:
        if release.transformers == "5.2.0":
            raise history.InstallError("transformers 5.2.0: ERROR: No matching distribution found")
        return history.Built(cache / release.name, Path("/usr/bin/python3"))

    measured: list[dict[str, str]] = []

    def run_suite(suite: Any, **kw: Any) -> runner.RunResult:
        measured.append(kw["release"])
        store = argparse.Namespace(run_id=f"{HW}/{run_base(suite.name, suite.hash, kw['release'])}")
        return runner.RunResult(store=store, records=[  # type: ignore[arg-type]
            {"id": "llama-small--prefill--fp32--sdpa--b1--s128", "status": "skipped",
             "reason": "llama: sdpa not in transformers 5.19.0"}, {"id": "x", "status": "ok"}])

    monkeypatch.setattr(history, "ensure_release", ensure)
    monkeypatch.setattr(history, "collect_environment", lambda python, device: {})
    monkeypatch.setattr(runner, "run_suite", run_suite)
    monkeypatch.setattr(runner, "local_executor", lambda suite, **kw: None)
    sets = release_sets(["2.13.0"], ["5.2.0", "5.19.0", "5.25.0"])
    outcomes = command.measure_all(load_suite("history", {}), sets, cache=tmp_path, out=tmp_path / "runs",
                                   timeout_s=None, command="reportgen history")
    assert [m["transformers"] for m in measured] == ["5.19.0", "5.25.0"]
    out = capsys.readouterr().out
    # once when it happens, once in the summary
    assert out.count("torch 2.13.0, transformers 5.2.0: not measured: transformers 5.2.0: ERROR") == 2
    assert "llama-small--prefill--fp32--sdpa--b1--s128: skipped: llama: sdpa not in transformers 5.19.0" in out
    assert [o["run_id"] is None for o in outcomes] == [True, False, False]


def test_an_attention_implementation_a_release_lacks_is_a_skip_naming_the_release(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import transformers

    from reportgen.errors import Skip
    from reportgen.profile import building

    class NoSdpa:
        @staticmethod
        def from_config(*args: Any, **kwargs: Any) -> Any:
            raise ValueError("LlamaForCausalLM does not support an attention implementation through "
                             "torch.nn.functional.scaled_dot_product_attention yet.")

    monkeypatch.setattr(building, "auto_class", lambda *a, **k: NoSdpa)
    monkeypatch.setattr(transformers, "__version__", "5.2.0")
    config = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, vocab_size=100)
    with pytest.raises(Skip, match=r"^llama: sdpa not in transformers 5\.2\.0 \(does not support"):
        building._instantiate(config, "decoder", "sdpa", torch.float32, torch.device("cpu"))


# --- the pages -----------------------------------------------------------------------------

def _history_run(root: Path, transformers: str, factor: float, *, torch: str = "2.13.0",
                 only: str | None = None, started: str = "2099-01-01T00:00:00Z") -> Path:
    """A copy of the committed run as a history's run of one release set."""
    name = f"cpu-default-c11f32ec-torch{torch}-transformers{transformers}"
    dest = scaled_copy(root, factor, name=name, transformers=transformers, only=only, started=started)
    run = json.loads((dest / "run.json").read_text())
    run["environment"]["libraries"]["torch"] = f"{torch}+cpu"
    run["release"] = {"torch": torch, "transformers": transformers}
    (dest / "run.json").write_text(json.dumps(run))
    return dest


def _tree(tmp: Path) -> Path:
    root = tmp / "runs"
    shutil.copytree(RUN, root / HW / RUN.name, ignore=shutil.ignore_patterns("traces", "logs"))
    # measured newest release first, so the latest run is the oldest release
    _history_run(root, "5.25.0", 1.0, started="2099-01-01T00:00:00Z")
    _history_run(root, "5.20.0", 1.0, started="2099-01-02T00:00:00Z")
    _history_run(root, "5.19.0", 1.5, only="bert-base--forward--fp32--sdpa", started="2099-01-03T00:00:00Z")
    return root


def _bench(floor: float) -> dict[str, Any]:
    """A bench results document whose re-measurement moved every median by ``floor``."""
    return coverage_bench([floor] * 10)


def test_steps_beyond_the_drift_are_marked_with_the_release_pair_and_categories(tmp_path: Path) -> None:
    from reportgen.render import history

    runs = load_runs(_tree(tmp_path))
    (group,) = history.history_runs(runs).values()
    assert [r.run_id.rsplit("-", 1)[-1] for r in group] == ["transformers5.19.0", "transformers5.20.0",
                                                            "transformers5.25.0"]
    pts = history.points(group)
    found = history.steps(pts, "transformers", floor=0.05)
    marked = [s for s in found if s.marked]
    assert {(s.combo_id, s.base, s.new) for s in marked} == {
        ("bert-base--forward--fp32--sdpa--b1--s128", "5.19.0", "5.20.0"),
        ("bert-base--forward--fp32--sdpa--b1--s256", "5.19.0", "5.20.0")}
    step = marked[0]
    assert step.change == "faster" and step.ratio == pytest.approx(1 / 1.5, rel=0.01)
    # every category's time fell by a third: each is named with its move
    assert step.categories and all(c["change"] == pytest.approx(-1 / 3, abs=0.01) for c in step.categories)
    assert "33% faster between transformers 5.19.0 and 5.20.0: " in step.text() and "−33%" in step.text()
    # the unchanged steps are not marked
    assert all(s.change != "faster" for s in found if s.combo_id.startswith("gpt2"))
    # a drift larger than the step: the same step is within the noise, and said to be
    wide = [s for s in history.steps(pts, "transformers", floor=0.6) if s.combo_id == step.combo_id]
    assert [s.change for s in wide] == ["within noise", "no significant difference"]
    assert "within this hardware's run-to-run drift" in wide[0].text()
    # a skipped side is not compared
    pts[0].status = "skipped"
    assert history.steps(pts, "transformers", floor=0.05)[0].change == "not comparable"


def test_the_history_page_shows_each_release_and_the_steps(tmp_path: Path) -> None:
    from reportgen.render.pages import site_model
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment

    model = site_model(load_runs(_tree(tmp_path)), bench=_bench(0.05))
    pages = {p.path: p for p in model.pages}
    page = pages["history/cpu-amd-epyc-2c-cpu-default.md"]
    text = render_page(environment(), page)
    assert "## Steps beyond the noise" in text
    assert "bert-base--forward--fp32--sdpa--b1--s128: 33% faster between transformers 5.19.0 and 5.20.0" in text
    assert "up to 5.0%" in text
    assert "One torch release measured (2.13.0)" in text
    assert "### transformers 5.19.0, 5.20.0, 5.25.0 (with torch 2.13.0)" in text
    assert len(page.charts) == 2 and {c.name for c in page.charts} == {
        "transformers-torch-2.13.0-latency", "transformers-torch-2.13.0-shares"}
    for bad in ("None", "nan", "undefined"):
        assert bad not in text
    index = render_page(environment(), pages["history/index.md"])
    assert "| [cpu-default](cpu-amd-epyc-2c-cpu-default.md) |" in index and "| 5.19.0, 5.20.0, 5.25.0 | 2 |" in index
    # no cause recorded: each marked step says so and links the new release's notes
    assert text.count("Cause not identified; the release notes of transformers 5.20.0: "
                      "[https://github.com/huggingface/transformers/releases/tag/v5.20.0]"
                      "(https://github.com/huggingface/transformers/releases/tag/v5.20.0).") == 2


CAUSES = """\
- library: transformers
  release: "5.20.0"
  combinations: "bert-base--*--sdpa--*"
  cause: >-
    BERT's attention moved to the shared
    attention interface.
  source: {title: transformers 5.20.0 release notes, url: "https://github.com/huggingface/transformers/releases/tag/v5.20.0"}
"""


def test_a_recorded_cause_is_named_beside_the_steps_it_explains(tmp_path: Path) -> None:
    from reportgen.records.causes import load_causes
    from reportgen.render.pages import site_model
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment

    root = _tree(tmp_path)
    (root / "causes.yaml").write_text(CAUSES)
    causes = load_causes(root)
    assert [(c.library, c.release) for c in causes] == [("transformers", "5.20.0")]
    assert causes[0].explains("transformers", "5.19.0", "5.25.0", "bert-base--forward--fp32--sdpa--b1--s128")
    assert not causes[0].explains("transformers", "5.20.0", "5.25.0", "bert-base--forward--fp32--sdpa--b1--s128")
    assert not causes[0].explains("torch", "5.19.0", "5.20.0", "bert-base--forward--fp32--sdpa--b1--s128")
    assert not causes[0].explains("transformers", "5.19.0", "5.20.0", "gpt2--forward--fp32--sdpa--b1--s128")
    model = site_model(load_runs(root), bench=_bench(0.05), causes=causes)
    page = next(p for p in model.pages if p.path == "history/cpu-amd-epyc-2c-cpu-default.md")
    text = render_page(environment(), page)
    assert text.count("Cause (transformers 5.20.0): BERT&#39;s attention moved to the shared attention interface. "
                      "Source: [transformers 5.20.0 release notes]"
                      "(https://github.com/huggingface/transformers/releases/tag/v5.20.0).") == 2
    assert "Cause not identified" not in text


@pytest.mark.parametrize(("content", "message"), [
    ("- {library: jax, release: '1.0', combinations: '*', cause: x, source: {title: t, url: 'https://a'}}",
     r"causes.yaml: \[0\].library: 'jax' is not one of torch, transformers"),
    ("- {library: torch, release: '2.6', combinations: '*', cause: x}", r"causes.yaml: \[0\]: missing source"),
    ("- {library: torch, release: '2.6', combinations: '*', cause: x, source: {title: t, url: 'http://a'}}",
     r"causes.yaml: \[0\].source.url: 'http://a' is not an https address"),
    ("- {library: torch, release: '2.6', combinations: '*', cause: x, why: y, source: {title: t, url: 'https://a'}}",
     r"causes.yaml: \[0\].why: unknown field"),
    ("library: torch", r"causes.yaml: expected a list of causes"),
    ("- [unclosed", r"causes.yaml: not valid YAML \(line 1\)"),
])
def test_a_malformed_causes_file_is_one_line_naming_the_entry(tmp_path: Path, content: str, message: str) -> None:
    from reportgen.records.causes import load_causes

    (tmp_path / "causes.yaml").write_text(content)
    with pytest.raises(UserError, match=message):
        load_causes(tmp_path)


def test_the_rest_of_the_site_reads_the_current_release(tmp_path: Path) -> None:
    from reportgen.render.pages import site_model
    from reportgen.render.site import render_page
    from reportgen.render.templating import environment

    root = _tree(tmp_path)
    runs = load_runs(root)
    # the suite's own run stays current, though the history's runs are later
    (current,) = current_runs(runs)
    assert current.run_id == f"{HW}/{RUN.name}"
    model = site_model(runs)
    pages = {p.path: p for p in model.pages}
    changes = render_page(environment(), pages["changes/cpu-amd-epyc-2c-cpu-default.md"])
    assert "transformers5.19.0" not in changes and "nothing to compare with" in changes
    index = render_page(environment(), pages["changes/index.md"])
    assert "3 runs measured by `reportgen history`" in index and "[History](../history/index.md)" in index
    hardware = render_page(environment(), pages["hardware/cpu-amd-epyc-2c/index.md"])
    assert "Measured with torch 2.13.0, transformers 5.24.0." in hardware
    assert "[History](../../history/index.md)" in hardware
    combo = render_page(environment(), next(p for p in model.pages if p.path.endswith("/bert-base.md")))
    assert "transformers5.19.0" not in combo
    # a history's runs are never current, even in a series of their own
    shutil.rmtree(root / HW / RUN.name)
    assert current_runs(load_runs(root)) == []


def test_bisect_measures_the_releases_between_and_names_the_first_with_the_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen.commands import history as command

    root = tmp_path / "runs"
    combo = "bert-base--forward--fp32--sdpa--b1--s128"
    _history_run(root, "5.19.0", 1.5, only=combo)
    _history_run(root, "5.25.0", 1.0)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / f"{HW}.json").write_text(json.dumps(coverage_bench([0.05] * 10)))
    measured: list[str] = []

    def measure_one(suite: Any, release: ReleaseSet, **_: Any) -> dict[str, Any]:
        # the change came with 5.22.0: the releases before it are as slow as 5.19
        measured.append(release.transformers)
        faster = [int(p) for p in release.transformers.split(".")] >= [5, 22, 0]
        run = _history_run(root, release.transformers, 1.0 if faster else 1.5, only=combo)
        return {"run_id": f"{HW}/{run.name}", "line": "ok"}

    monkeypatch.setattr(command, "measure_one", measure_one)
    hash_ = json.loads((RUN / "run.json").read_text())["suite"]["hash"]
    suite = argparse.Namespace(name="cpu-default", hash=hash_)
    index = ["5.19.0", "5.20.0", "5.21.0", "5.22.0", "5.23.0", "5.24.0", "5.25.0", "5.25.0rc1"]
    code = command.bisect(suite, combo, [ReleaseSet("2.13.0", "5.25.0")], cache=tmp_path / "cache", out=root,
                          timeout_s=None, command="reportgen history", bench=tmp_path / "bench",
                          index=lambda _: index)
    assert code == 0
    assert measured == ["5.22.0", "5.21.0"]  # halving: the middle of 5.20-5.24, then of 5.20-5.21
    out = capsys.readouterr().out
    assert "first transformers release with the change: 5.22.0 (torch 2.13.0)" in out
    assert "between transformers 5.21.0 and 5.22.0" in out


def test_bisect_halves_a_torch_step_with_transformers_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen.commands import history as command

    root = tmp_path / "runs"
    combo = "bert-base--forward--fp32--sdpa--b1--s128"
    _history_run(root, "5.0.0", 1.5, torch="2.4.1", only=combo)
    _history_run(root, "5.0.0", 1.0, torch="2.10.0")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / f"{HW}.json").write_text(json.dumps(coverage_bench([0.05] * 10)))
    measured: list[tuple[str, str]] = []

    def measure_one(suite: Any, release: ReleaseSet, **_: Any) -> dict[str, Any]:
        # the change came with torch 2.6.0
        measured.append((release.torch, release.transformers))
        faster = [int(p) for p in release.torch.split(".")] >= [2, 6, 0]
        run = _history_run(root, release.transformers, 1.0 if faster else 1.5, torch=release.torch, only=combo)
        return {"run_id": f"{HW}/{run.name}", "line": "ok"}

    monkeypatch.setattr(command, "measure_one", measure_one)
    hash_ = json.loads((RUN / "run.json").read_text())["suite"]["hash"]
    suite = argparse.Namespace(name="cpu-default", hash=hash_)
    index = {"torch": ["2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.10.0"],
             "transformers": ["5.0.0"]}
    sets = [ReleaseSet("2.4.1", "5.0.0"), ReleaseSet("2.10.0", "5.0.0")]
    code = command.bisect(suite, combo, sets, cache=tmp_path / "cache", out=root, timeout_s=None,
                          command="reportgen history", bench=tmp_path / "bench", index=lambda lib: index[lib])
    assert code == 0
    # the middle of 2.5.0-2.9.0 (2.7.0), then of 2.5.0-2.6.0 (2.5.1), then 2.6.0 alone
    assert measured == [("2.7.0", "5.0.0"), ("2.5.1", "5.0.0"), ("2.6.0", "5.0.0")]
    out = capsys.readouterr().out
    assert "first torch release with the change: 2.6.0 (transformers 5.0.0)" in out
    assert "between torch 2.5.1 and 2.6.0" in out
    # no two releases of either library measured: nothing to halve, said so
    empty = tmp_path / "empty"
    empty.mkdir()
    assert command.bisect(suite, combo, sets, cache=tmp_path / "cache", out=empty, timeout_s=None,
                          command="reportgen history", bench=tmp_path / "bench",
                          index=lambda lib: index[lib]) == 1
    assert "measure some releases first" in capsys.readouterr().out


def test_compare_of_two_releases_says_which_versions_differ(tmp_path: Path) -> None:
    from reportgen.commands.compare import text
    from reportgen.render.compare import Side, compare

    root = tmp_path / "runs"
    _history_run(root, "5.19.0", 1.5, only="bert-base")
    _history_run(root, "5.25.0", 1.0, torch="2.14.1")
    old, new = sorted(load_runs(root), key=lambda r: r.run_id)
    report = text(compare(Side(old.run_id, (old,)), Side(new.run_id, (new,))).as_dict())
    assert "  torch: 2.13.0+cpu -> 2.14.1+cpu" in report and "  transformers: 5.19.0 -> 5.25.0" in report


def test_each_release_set_is_a_run_of_its_own_that_resumes(tmp_path: Path) -> None:
    from reportgen.execute import runner
    from reportgen.suite import load_suite, parse_overrides

    suite = load_suite("tiny", parse_overrides({"models": "bert-base,gpt2", "attn": "sdpa", "device": "cpu"}))
    release = {"torch": "2.13.0", "transformers": "5.20.2"}
    kw: dict[str, Any] = {"out": tmp_path, "environment": {"git": None}, "hardware": "test-host",
                          "show_progress": False}
    first = InProcessMeasure(interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        runner.run_suite(suite, measure=first, release=release, **kw)
    base = f"{suite.name}-{suite.hash[:8]}"
    run_dir = tmp_path / "test-host" / f"{base}-torch2.13.0-transformers5.20.2"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "interrupted" and run["release"] == release
    again = InProcessMeasure()
    runner.run_suite(suite, measure=again, release=release, **kw)
    assert set(again.calls).isdisjoint(first.calls[:2])
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
    # another release set, and the suite's own run, never pool with it
    runner.run_suite(suite, measure=InProcessMeasure(), release={**release, "transformers": "5.25.0"}, **kw)
    plain = InProcessMeasure()
    runner.run_suite(suite, measure=plain, **kw)
    assert sorted(p.name for p in (tmp_path / "test-host").iterdir()) == [
        base, f"{base}-torch2.13.0-transformers5.20.2", f"{base}-torch2.13.0-transformers5.25.0"]
    assert len(plain.calls) == len(suite.combinations())


def test_bad_history_flags_are_one_line_and_install_nothing(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen import cli

    (tmp_path / "file").write_text("")
    cases = ((["--transformers", "5.25.0", "--threads", "0"], "--threads: a number of threads, 1 or more, not '0'"),
             (["--transformers", "5.x"], "--transformers: '5.x' is not a release version"),
             (["--transformers", "5.25.0", "--cache", str(tmp_path / "file")], "--cache: "),
             (["--transformers", "5.25.0", "--bisect", "nope"], "--bisect: 'nope' is not a combination of history"))
    for argv, words in cases:
        code = cli.main(["history", *argv])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_step_measured_under_contention_says_so(tmp_path: Path) -> None:
    from reportgen.render import history

    root = tmp_path / "runs"
    combo = "bert-base--forward--fp32--sdpa--b1--s128"
    _history_run(root, "5.19.0", 1.5, only=combo)
    new = _history_run(root, "5.20.0", 1.0)
    path = new / "combinations" / f"{combo}.json"
    rec = json.loads(path.read_text())
    rec["timing"]["unstable"] = "another process used 90% of the CPU while it was timed"
    path.write_text(json.dumps(rec))
    (group,) = history.history_runs(load_runs(root)).values()
    (step,) = [s for s in history.steps(history.points(group), "transformers", 0.05) if s.combo_id == combo]
    assert step.marked and step.unstable == "new: another process used 90% of the CPU while it was timed"


def test_a_claim_says_under_which_releases_it_holds(tmp_path: Path) -> None:
    from reportgen.claims.evaluate import check, releases_summary
    from reportgen.render.findings import pages

    root = _tree(tmp_path)  # transformers 5.19.0: BERT-base SDPA 1.5x slower than under 5.20.0, 5.25.0
    claims = tmp_path / "claims"
    claims.mkdir()
    (claims / "bert-fast.yaml").write_text(
        "id: bert-fast\ntitle: BERT-base SDPA at 128 tokens in under 200 ms\n"
        "quote: BERT-base runs a forward of 128 tokens in under 200 ms.\n"
        "source: {title: A test claim, url: 'https://example.org/claim', date: 2026-12-01, quote_in_primary: found}\n"
        "conditions: {model: bert-base, mode: forward, attn_implementation: sdpa, seq_len: {max: 128},"
        " hardware: any, setting: inference}\n"
        "predicate: {metric: latency, op: '<', value: 200}\n")
    (result,) = check(root, claims).claims
    # the site's verdict reads the installed release's run only (163 ms: supported)
    assert result.verdict == "supported" and all("transformers" not in r["run_id"] for r in result.evidence)
    by_release = {e["transformers"]: e for e in result.releases}
    assert set(by_release) == {"5.19.0", "5.20.0", "5.25.0"}
    assert by_release["5.19.0"]["verdict"] == "refuted" and by_release["5.19.0"]["decides"]
    assert by_release["5.20.0"]["verdict"] == by_release["5.25.0"]["verdict"] == "supported"
    assert by_release["5.19.0"]["measured"] == "245 ms"  # 1.5 x 163.3 ms
    assert releases_summary(result.releases) == (
        "The outcome depends on the release: refuted under torch 2.13.0 with transformers 5.19.0; "
        "supported under torch 2.13.0 with transformers 5.20.0, torch 2.13.0 with transformers 5.25.0.")
    page = pages(root, claims)["findings/bert-fast.md"]
    assert "## Across releases" in page
    assert "| CPU · AMD EPYC · 2 cores | 2.13.0 | 5.19.0 | 1 | 245 ms | refuted |" in page
    # a claim the history's models never meet has no such section
    (claims / "bert-fast.yaml").write_text((claims / "bert-fast.yaml").read_text().replace("bert-base", "mistral-7b"))
    assert check(root, claims).claims[0].releases == []
    assert "## Across releases" not in pages(root, claims)["findings/bert-fast.md"]


def test_a_release_set_whose_run_is_complete_builds_no_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reportgen import cli
    from reportgen.commands import history as command
    from reportgen.execute import history, runner
    from reportgen.suite import load_suite

    suite = load_suite("history", {})
    out = tmp_path / "runs"
    kw: dict[str, Any] = {"out": out, "environment": {"git": None}, "hardware": "test-host", "show_progress": False}
    runner.run_suite(suite, measure=InProcessMeasure(), release={"torch": "2.13.0", "transformers": "5.20.2"}, **kw)
    with pytest.raises(KeyboardInterrupt):  # a run left half-measured is resumed, in its environment
        runner.run_suite(suite, measure=InProcessMeasure(interrupt_at=3),
                         release={"torch": "2.13.0", "transformers": "5.25.0"}, **kw)
    built: list[str] = []
    measured: list[str] = []

    def ensure(cache: Path, release: ReleaseSet, **_: Any) -> history.Built:
        built.append(release.name)
        return history.Built(cache / release.name, Path("/usr/bin/python3"))

    def run_suite(suite: Any, **kw: Any) -> runner.RunResult:
        measured.append(kw["release"]["transformers"])
        return runner.RunResult(store=argparse.Namespace(run_id="x"))  # type: ignore[arg-type]

    monkeypatch.setattr(history, "this_hardware", lambda device: "test-host")
    monkeypatch.setattr(history, "ensure_release", ensure)
    monkeypatch.setattr(history, "collect_environment", lambda python, device: {})
    monkeypatch.setattr(runner, "run_suite", run_suite)
    monkeypatch.setattr(runner, "local_executor", lambda suite, **kw: None)
    sets = release_sets(["2.13.0"], ["5.20.2", "5.25.0", "5.26.0"])
    outcomes = command.measure_all(suite, sets, cache=tmp_path / "cache", out=out, timeout_s=None,
                                   command="reportgen history")
    assert built == ["2.13.0-5.25.0", "2.13.0-5.26.0"] and measured == ["5.25.0", "5.26.0"]
    complete = f"test-host/{run_base(suite.name, suite.hash, sets[0].as_dict())}"
    assert outcomes[0]["run_id"] == complete
    assert f"torch 2.13.0, transformers 5.20.2: {complete}: complete, nothing to measure" in capsys.readouterr().out
    # on another host the same run is not this host's: its environment is built
    monkeypatch.setattr(history, "this_hardware", lambda device: "other-host")
    built.clear()
    command.measure_one(suite, sets[0], cache=tmp_path / "cache", out=out, timeout_s=None, command="")
    assert built == ["2.13.0-5.20.2"]

    # a --bisect reads its two measured endpoints: neither environment is built again
    monkeypatch.undo()  # the real runner finishes the half-measured run first
    runner.run_suite(load_suite("history", {}), measure=InProcessMeasure(),
                     release={"torch": "2.13.0", "transformers": "5.25.0"}, **kw)
    monkeypatch.setattr(history, "this_hardware", lambda device: "test-host")
    monkeypatch.setattr(history, "ensure_release", ensure)
    monkeypatch.setattr(history, "collect_environment", lambda python, device: {})
    monkeypatch.setattr(runner, "run_suite", run_suite)
    monkeypatch.setattr(runner, "local_executor", lambda suite, **kw: None)
    bisected: list[list[str]] = []
    monkeypatch.setattr(command, "bisect",
                        lambda suite, combo, sets, **_: bisected.append([s.name for s in sets]) or 0)
    built.clear()
    combo = suite.combinations()[0].id
    code = cli.main(["history", "--torch", "2.13.0", "--transformers", "5.20.2,5.25.0", "--bisect", combo,
                     "--out", str(out), "--cache", str(tmp_path / "cache")])
    assert code == 0 and built == [] and bisected == [["2.13.0-5.20.2", "2.13.0-5.25.0"]]
