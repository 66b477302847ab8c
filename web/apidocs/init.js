// Tollgate's API reference: Redoc (loaded before this script) draws the
// OpenAPI document that #redoc names. No request leaves Tollgate: the fonts
// are the system's, and search is off (Redoc runs it in a worker made from a
// blob: URL, which the page's Content-Security-Policy refuses). The style
// elements Redoc adds carry this script's nonce, the only inline style the
// policy allows.
(function () {
  "use strict";
  var el = document.getElementById("redoc");
  var sans = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
  Redoc.init(el.dataset.specUrl, {
    nonce: document.currentScript.nonce,
    disableSearch: true,
    expandResponses: "200",
    theme: {
      colors: { primary: { main: "#14213d" } },
      typography: {
        fontFamily: sans,
        headings: { fontFamily: sans },
        code: { fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" },
      },
    },
  }, el);
})();
