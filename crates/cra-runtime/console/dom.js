// DOM helpers of the console. Every text the API returns goes through `textContent` (never
// `innerHTML`), so a payload holding markup or script is shown as the characters it is.

/** An element: `h("a", {href: "#/x", class: "y"}, "text", child, ...)`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) {
      el.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends children: nodes as they are, strings and numbers as text, arrays flattened. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A table from column names and rows of cells. */
export function table(columns, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))));
}

/** A JSON value, indented, as text. */
export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

/** A badge: `kind` picks its colour (allow, deny, pending, ok, bad, ...). */
export function badge(text, kind = String(text)) {
  return h("span", { class: `badge badge-${kind.replace(/[^a-z_]/g, "")}` }, text);
}

/** A message box for an error the API answered (its token, message and pointer). */
export function problem(err) {
  const parts = [err.token ? `${err.token}: ` : "", err.message || String(err)];
  if (err.pointer) parts.push(` (at ${err.pointer})`);
  return h("p", { class: "problem", role: "alert" }, parts.join(""));
}
