// Live pages: the task list, a task's page and the Problems page refresh themselves.
// Every N seconds (<main data-live="N">) the page asks its own URL again, marked with the
// X-Cronstore-Live header, and swaps in the new <main>, summary line and footer: what a
// reload would show, without one. No framework; loaded as an external file (the
// Content-Security-Policy allows same-origin scripts only, and fetches to this origin).
// It waits while the tab is hidden, a form field has focus or holds an unsent change, or
// text is selected on the page (someone is copying a traceback); open <details> with an
// id stay open. A lapsed session (401) or a redirect stops it, with a note to reload.
"use strict";
(function () {
  const main = document.querySelector("main[data-live]");
  if (!main) return;
  const every = Math.max(Number(main.dataset.live) || 10, 2) * 1000;
  let timer = null;
  let busy = false;
  let stopped = false;

  function fieldFocused() {
    const active = document.activeElement;
    return !!active && active.matches("input, select, textarea");
  }

  function dirty() {
    for (const field of main.querySelectorAll("input, select, textarea")) {
      if (field.type === "hidden") continue;
      if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) return true;
      } else if (field.tagName === "SELECT") {
        for (const option of field.options) {
          if (option.selected !== option.defaultSelected) return true;
        }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function selecting() {
    const selection = window.getSelection();
    return !!selection && !selection.isCollapsed && selection.toString().trim() !== "";
  }

  function wait() {
    return document.hidden || fieldFocused() || dirty() || selecting();
  }

  function stop(message) {
    stopped = true;
    clearTimeout(timer);
    const note = document.createElement("p");
    note.className = "error live-note";
    note.setAttribute("role", "status");
    note.textContent = message;
    main.prepend(note);
  }

  function swap(fresh) {
    const open = new Set(
      Array.from(main.querySelectorAll("details[id][open]"), (d) => d.id),
    );
    const next = fresh.querySelector("main");
    if (!next) return;
    main.replaceChildren(...next.childNodes);
    for (const details of main.querySelectorAll("details[id]")) {
      if (open.has(details.id)) details.open = true;
    }
    const summary = document.getElementById("summary");
    const newSummary = fresh.getElementById("summary");
    if (summary && newSummary) summary.replaceWith(newSummary);
    else if (summary) summary.remove(); // the store is away: no numbers to show
    else if (newSummary) main.before(newSummary);
    const footer = document.querySelector("body > footer");
    const newFooter = fresh.querySelector("body > footer");
    if (footer && newFooter) footer.replaceWith(newFooter);
    main.dataset.liveCount = String(Number(main.dataset.liveCount || 0) + 1);
  }

  async function refresh() {
    if (stopped || busy) return;
    if (wait()) {
      schedule();
      return;
    }
    busy = true;
    try {
      const response = await fetch(window.location.href, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { "X-Cronstore-Live": "1", Accept: "text/html" },
      });
      if (response.status === 401 || response.redirected) {
        stop("Live updates stopped: the session ended. Reload the page to log in again.");
        return;
      }
      const type = response.headers.get("Content-Type") || "";
      if (!type.startsWith("text/html")) return; // a plain error: try again next round
      const text = await response.text();
      if (!wait()) swap(new DOMParser().parseFromString(text, "text/html"));
    } catch (_) {
      // Offline or the dashboard restarting: try again next round.
    } finally {
      busy = false;
      schedule();
    }
  }

  function schedule() {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(refresh, every);
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !stopped && !busy) refresh(); // back in view: catch up now
  });
  schedule();
})();
