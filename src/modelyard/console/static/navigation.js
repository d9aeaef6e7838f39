// The navigation on a narrow screen: the sections fold behind a "Menu" button (every section one
// tap away) instead of a bar that hides most of them past the edge. Without this script the bar
// stays as it is, and scrolls sideways.
(() => {
  const header = document.querySelector("header.top");
  const button = header?.querySelector(".menu-button");
  if (!header || !button) return;
  const setOpen = (open) => {
    header.dataset.menu = open ? "open" : "closed";
    button.setAttribute("aria-expanded", String(open));
  };
  button.hidden = false;
  setOpen(false);
  button.addEventListener("click", () => setOpen(header.dataset.menu !== "open"));
  header.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && header.dataset.menu === "open") {
      setOpen(false);
      button.focus();
    }
  });
})();
