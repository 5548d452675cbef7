// The console's shell: sign in with an API key, then a page per `#/route`. The pages are in
// views.js; what each may show is decided by the server for the key (see api.js).

import { forgetKey, get, storeKey, storedKey } from "./api.js";
import { h, problem, replace } from "./dom.js";
import * as views from "./views.js";

const main = document.getElementById("main");
const signIn = document.getElementById("sign-in");
let leave = null;
/** The signed-in actor (`GET /v1/whoami`), which picks the first page; the server enforces roles. */
let me = null;

const can = (role) => Boolean(me && (me.roles.includes(role) || me.roles.includes("admin")));

/** The page for a location hash: `#/sessions/ID` is the view `session` with `ID`. */
function route(hash) {
  const [page, ...rest] = hash.replace(/^#\/?/, "").split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : undefined;
  switch (page) {
    case "sessions": return arg ? () => views.session(main, arg) : () => views.sessions(main);
    case "approvals": return () => views.approvals(main);
    case "atlases": return arg ? () => views.atlas(main, arg) : () => views.atlases(main);
    case "relay": return () => views.relay(main, arg);
    case "health": return () => views.health(main);
    case "live": return () => views.live(main, can("operator"));
    default: return () => (can("operator") ? views.live(main, true) : views.sessions(main));
  }
}

async function show() {
  if (leave) leave();
  leave = null;
  if (!storedKey()) return askForKey();
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("here", location.hash.startsWith(a.getAttribute("href")));
  }
  replace(main, h("p", { class: "loading" }, "Loading"));
  const shown = location.hash;
  try {
    const stop = await route(location.hash)();
    if (location.hash === shown) leave = typeof stop === "function" ? stop : null;
    else if (typeof stop === "function") stop();
  } catch (e) {
    if (e.status === 401) {
      forgetKey();
      return askForKey(e);
    }
    replace(main, h("h1", {}, "This page could not be shown"), problem(e));
  }
}

function askForKey(err) {
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  document.getElementById("who").textContent = "";
  me = null;
  replace(main);
  signIn.hidden = false;
  const out = document.getElementById("sign-in-problem");
  out.hidden = !err;
  out.textContent = err ? `${err.message}` : "";
}

/** Learns who the key is, then shows the navigation and the page the location names. */
async function signedIn() {
  try {
    me = await get("/v1/whoami");
  } catch (err) {
    forgetKey();
    return askForKey(err);
  }
  document.getElementById("who").textContent = `${me.actor_id} (${me.roles.join(", ")})`;
  signIn.hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = false;
  await show();
}

signIn.addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = document.getElementById("key");
  storeKey(input.value.trim());
  input.value = "";
  await signedIn();
});

document.getElementById("sign-out").addEventListener("click", () => {
  forgetKey();
  if (leave) leave();
  leave = null;
  askForKey();
});

window.addEventListener("hashchange", show);
if (storedKey()) signedIn(); else askForKey();
