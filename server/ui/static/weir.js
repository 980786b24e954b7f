// weir UI: progressive enhancement only; every page works without it.
(function () {
  "use strict";

  // A form on its way to the server: the page is being left, and the live
  // refresh below must not reload it. A reload then cancels the navigation
  // to the submission's answer (a redirect to the run's page with its flash
  // message), and the page comes back as it was, the message lost, although
  // the action was taken (a signal changes the run's history, which is what
  // makes the refresh reload).
  var leaving = false;

  // Namespace switcher: navigate on change.
  document.querySelectorAll("select[data-autosubmit]").forEach(function (sel) {
    sel.addEventListener("change", function () { leaving = true; sel.form.submit(); });
  });

  // Confirm destructive actions (the submitter's message wins).
  document.querySelectorAll("form").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      var btn = ev.submitter;
      var msg = (btn && btn.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
      if (msg && !window.confirm(msg)) { ev.preventDefault(); return; }
      leaving = true;
    });
  });
  // Back from the browser's cache (history navigation), the page is shown
  // again: it may refresh itself again.
  window.addEventListener("pageshow", function () { leaving = false; });

  // Live refresh of a running run: poll its status and reload the page when
  // its state or history length changes.
  var live = document.querySelector("[data-live]");
  if (live) {
    var url = live.getAttribute("data-live");
    var state = live.getAttribute("data-state");
    var length = live.getAttribute("data-history");
    var busy = function () {
      var el = document.activeElement;
      return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA") && el.value !== "";
    };
    var poll = function () {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (s) {
          if (leaving) { window.setTimeout(poll, 1500); return; }
          if (s && (s.state !== state || String(s.history_length) !== length) && !busy()) {
            window.location.reload();
            return;
          }
          window.setTimeout(poll, 1500);
        })
        .catch(function () { window.setTimeout(poll, 5000); });
    };
    window.setTimeout(poll, 1500);
  }

  // Auto-refresh of the list, remembered per browser.
  var auto = document.querySelector("input[data-autorefresh]");
  if (auto) {
    var key = "weir.autorefresh";
    auto.checked = window.localStorage.getItem(key) === "1";
    var timer = null;
    var arm = function () {
      if (timer) { window.clearTimeout(timer); timer = null; }
      if (auto.checked) { timer = window.setTimeout(function () { if (leaving) { arm(); } else { window.location.reload(); } }, 5000); }
    };
    auto.addEventListener("change", function () {
      window.localStorage.setItem(key, auto.checked ? "1" : "0");
      arm();
    });
    arm();
  }

})();
