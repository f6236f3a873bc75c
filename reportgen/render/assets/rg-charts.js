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

  function scheme() {
    return document.body.getAttribute("data-md-color-scheme") === "slate" ? "dark" : "light";
  }

  function options() {
    var opts = { renderer: "svg", actions: false, tooltip: { theme: scheme() } };
    if (scheme() === "dark") {
      opts.theme = "dark";
    }
    opts.config = { background: null };
    return opts;
  }

  function draw(container) {
    var source = container.getAttribute("data-spec");
    if (!source || typeof window.vegaEmbed !== "function") {
      return Promise.resolve();
    }
    var spec = JSON.parse(source);
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
      container.classList.add("rg-drawn");
      container.setAttribute("data-rg-scheme", scheme());
    }).catch(function (error) {
      container.classList.remove("rg-drawn");
      console.error("reportgen: chart " + container.getAttribute("data-chart") + " failed", error);
    });
  }

  function drawAll() {
    var containers = Array.prototype.slice.call(document.querySelectorAll("div.rg-chart"));
    return Promise.all(containers.map(draw));
  }

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
