// Live timer validation for the edit form: asks the dashboard's /api/preview endpoint
// (same origin, the page's session) and shows the next fire times or the parse error.
// Loaded as an external file: the Content-Security-Policy allows no inline script.
"use strict";
(function () {
  const form = document.getElementById("task-form");
  const box = document.getElementById("preview");
  if (!form || !box) return;
  const fields = ["timer", "kind", "tz"].map((id) => document.getElementById(id));
  let pending = null;
  let sequence = 0;

  function show(answer) {
    box.replaceChildren();
    if (!answer.ok) {
      const p = document.createElement("p");
      p.className = "field-error";
      p.textContent = answer.error;
      box.append(p);
      return;
    }
    const p = document.createElement("p");
    const code = document.createElement("code");
    code.textContent = answer.canonical;
    p.append(code, ` (${answer.kind}, ${answer.zone}): ${answer.description}`);
    const list = document.createElement("ol");
    for (const fire of answer.next) {
      const item = document.createElement("li");
      item.textContent = fire.local;
      list.append(item);
    }
    box.append(p, list);
  }

  // The kind the timer is read as: the server's rule (timers.edit_kind). The form shows
  // the stored kind; left so while the expression changed, it is detected again.
  function kind() {
    const stored = form.dataset.kind;
    const chosen = fields[1].value;
    if (stored !== undefined && chosen === stored && fields[0].value.trim() !== form.dataset.timer) {
      return "";
    }
    return chosen;
  }

  async function check() {
    const mine = ++sequence;
    const query = new URLSearchParams({
      timer: fields[0].value, kind: kind(), tz: fields[2].value,
    });
    try {
      const response = await fetch(`${form.dataset.preview}?${query}`, {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (!response.ok || mine !== sequence) return;
      show(await response.json());
    } catch (_) { /* offline: the server checks again on save */ }
  }

  for (const field of fields) {
    field.addEventListener("input", () => {
      clearTimeout(pending);
      pending = setTimeout(check, 250);
    });
  }
})();
