// Reloads a page that asks for it (<body data-refresh="SECONDS">) every
// SECONDS (at least 5) while the tab is visible; a hidden tab waits until it
// is shown again. Pages work without it.
(function () {
  var s = Number(document.body && document.body.dataset.refresh);
  if (!(s >= 5)) return;
  var due = Date.now() + s * 1000;
  setInterval(function () {
    if (document.visibilityState === "visible" && Date.now() >= due) location.reload();
  }, 1000);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && Date.now() >= due) location.reload();
  });
})();
