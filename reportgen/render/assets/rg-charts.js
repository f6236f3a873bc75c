/* reportgen: draw the Vega-Lite specs embedded in each page with vega-embed.
 *
 * Each chart is <div class="rg-chart" data-spec="{Vega-Lite JSON}"> holding a static SVG
 * fallback image. (Not a <script type="application/json">: instant navigation re-creates
 * script elements to run them, whatever their type.) The fallback stays visible until the
 * chart is drawn, so readers without JavaScript still see it. Charts are redrawn when
 * Material's instant navigation swaps the page (document$) and when the reader switches
 * between the light and dark palettes (data-md-color-scheme on <body>).
 */
(function () {
  "use strict";

  var DARK_MARK = "#6fa8dc";
  var DARK_RULE = "#b8b8b8";
  var DARK_TEXT = "#e0e0e0";
  var DARK_BG = [0x1e, 0x21, 0x29]; /* the slate palette's background */
  var MIN_CONTRAST = 4.5; /* well above WCAG's 3:1 floor for graphics: thin whiskers and small points */

  function luminance(rgb) {
    var c = rgb.map(function (v) {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  }

  function contrast(a, b) {
    var la = luminance(a), lb = luminance(b);
    return (Math.max(la, lb) + 0.05) / (Math.min(la, lb) + 0.05);
  }

  /* A colour the spec names (a category's, an implementation's) lightened towards white
   * until it stands out from the dark background: dark blues and browns vanish there. */
  function forDark(hex) {
    var rgb = [1, 3, 5].map(function (i) { return parseInt(hex.substr(i, 2), 16); });
    var t = 0;
    var out = rgb;
    while (contrast(out, DARK_BG) < MIN_CONTRAST && t < 1) {
      t += 0.05;
      out = rgb.map(function (v) { return Math.round(v + (255 - v) * t); });
    }
    return "#" + out.map(function (v) { return ("0" + v.toString(16)).slice(-2); }).join("");
  }

  function darken(node) {
    if (typeof node === "string") {
      return /^#[0-9a-fA-F]{6}$/.test(node) ? forDark(node) : node;
    }
    if (Array.isArray(node)) {
      return node.map(darken);
    }
    if (node && typeof node === "object") {
      var out = {};
      Object.keys(node).forEach(function (k) {
        /* the data rows are the reader's numbers and names: never rewritten */
        out[k] = k === "data" || k === "values" ? node[k] : darken(node[k]);
      });
      return out;
    }
    return node;
  }

  function scheme() {
    return document.body.getAttribute("data-md-color-scheme") === "slate" ? "dark" : "light";
  }

  function options() {
    var opts = { renderer: "svg", actions: false, tooltip: { theme: scheme() } };
    opts.config = { background: null };
    if (scheme() === "dark") {
      opts.theme = "dark";
      /* Marks without a colour of their own (interval whiskers, single-series points,
       * bars and lines) default to colours made for a white page; on the dark palette
       * they take these, with at least 3:1 contrast against its background. */
      opts.config = {
        background: null,
        mark: { color: DARK_MARK },
        rule: { color: DARK_RULE },
        point: { color: DARK_MARK },
        bar: { fill: DARK_MARK },
        line: { stroke: DARK_MARK },
        text: { fill: DARK_TEXT }
      };
    }
    return opts;
  }

  function draw(container) {
    var source = container.getAttribute("data-spec");
    if (!source || typeof window.vegaEmbed !== "function") {
      return Promise.resolve();
    }
    var spec = JSON.parse(source);
    if (scheme() === "dark") {
      spec = darken(spec);
    }
    var target = container.querySelector(".rg-view");
    if (!target) {
      target = document.createElement("div");
      target.className = "rg-view";
      container.insertBefore(target, container.firstChild);
    }
    if (container.rgView) {
      container.rgView.finalize();
      container.rgView = null;
    }
    return window.vegaEmbed(target, spec, options()).then(function (result) {
      container.rgView = result;
      keepReadable(target);
      container.classList.add("rg-drawn");
      cue(container);
      container.setAttribute("data-rg-scheme", scheme());
    }).catch(function (error) {
      container.classList.remove("rg-drawn");
      console.error("reportgen: chart " + container.getAttribute("data-chart") + " failed", error);
    });
  }

  function drawAll() {
    var containers = Array.prototype.slice.call(document.querySelectorAll("div.rg-chart"));
    cueTables();
    return Promise.all(containers.map(draw));
  }

  /* A chart shrinks with the column down to MIN_SCALE of its drawn width, then keeps that
   * width and scrolls sideways inside its container: on a phone its text stays readable. */
  var MIN_SCALE = 0.8;
  function keepReadable(target) {
    var svg = target.querySelector("svg");
    var width = svg && parseFloat(svg.getAttribute("width"));
    if (width) {
      svg.style.minWidth = Math.round(width * MIN_SCALE) + "px";
    }
  }

  /* Wide tables and charts scroll inside their own container; a line above each one that
   * does says so, since the columns to the right (often the verdict or the interval) are
   * otherwise out of sight with nothing to show they exist. */
  function cue(scroller) {
    var previous = scroller.previousElementSibling;
    var has = previous && previous.classList.contains("rg-scroll-cue");
    var overflows = scroller.scrollWidth > scroller.clientWidth + 1;
    if (overflows && !has) {
      var note = document.createElement("div");
      note.className = "rg-scroll-cue";
      note.setAttribute("aria-hidden", "true");
      note.textContent = scroller.classList.contains("rg-chart")
        ? "Wider than the page: scroll the chart sideways \u2192"
        : "More columns to the right: scroll the table sideways \u2192";
      scroller.parentNode.insertBefore(note, scroller);
    } else if (!overflows && has) {
      previous.parentNode.removeChild(previous);
    }
  }

  function cueTables() {
    Array.prototype.forEach.call(document.querySelectorAll(".md-typeset__scrollwrap"), cue);
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    window.clearTimeout(resizeTimer);
    resizeTimer = window.setTimeout(function () {
      cueTables();
      Array.prototype.forEach.call(document.querySelectorAll("div.rg-chart.rg-drawn"), cue);
    }, 150);
  });

  var currentScheme = null;
  function onSchemeChange() {
    if (scheme() !== currentScheme) {
      currentScheme = scheme();
      drawAll();
    }
  }

  function start() {
    currentScheme = scheme();
    new MutationObserver(onSchemeChange).observe(document.body, {
      attributes: true, attributeFilter: ["data-md-color-scheme"]
    });
    if (window.document$ && typeof window.document$.subscribe === "function") {
      window.document$.subscribe(function () { drawAll(); });
    } else {
      drawAll();
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
