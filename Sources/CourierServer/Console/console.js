// Courier's web console (docs/console.md): plain JavaScript, served by the
// admin server, talking only to it. Every value from the server is put in
// the page as text (textContent), never as markup: a payload holding HTML
// shows as that HTML's text.
"use strict";

const state = { csrf: null, timers: [], stream: null, status: null, teams: [], page: 0 };

// MARK: DOM helpers

/** An element with attributes (on* names become listeners) and children (strings become text). */
function h(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "text") element.textContent = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

let fieldCount = 0;
/** A labelled control: the label wraps its text and the control. */
function field(labelText, control, attributes) {
  if (!control.id) control.id = "f" + (++fieldCount);
  return h("label", Object.assign({ for: control.id }, attributes || {}), labelText, control);
}

function options(values, selected) {
  return values.map((v) => {
    const [value, text] = Array.isArray(v) ? v : [v, v];
    return h("option", { value, selected: value === selected }, text);
  });
}

/** A short message at the bottom; an error (`failed`) is styled as one and stays until the next message or dismissal. */
function say(message, isError) {
  const status = document.getElementById("status");
  status.textContent = message;
  status.className = isError ? "error" : "";
  status.setAttribute("role", isError ? "alert" : "status");
  clearTimeout(say.timer);
  if (isError) {
    status.append(" ", h("button", { type: "button", class: "dismiss", "aria-label": "Dismiss", onclick: () => say("") }, "×"));
  } else {
    say.timer = setTimeout(() => { status.textContent = ""; }, 6000);
  }
}

function table(headers, rows) {
  return h("div", { class: "table" },
    h("table", {}, h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, rows)));
}

/** A topic or bundle id that breaks across lines after its dots, not inside its words. */
function breakable(text) {
  return String(text).split(/(?<=\.)/).flatMap((part, i) => (i ? [h("wbr", {}), part] : [part]));
}

/** The time from one ISO 8601 instant to another: "12 ms", "1.5 s", "3 min 20 s". */
function elapsed(from, to) {
  const ms = Math.max(0, Date.parse(to) - Date.parse(from));
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

// "2026-11-28 19:52:39 UTC"; milliseconds only when there are some ("…:39.250").
function shortTime(iso) { return iso ? iso.replace("T", " ").replace(".000Z", "Z").replace("Z", " UTC") : ""; }

function download(fileName, content, type) {
  const url = URL.createObjectURL(new Blob([content], { type: type || "application/octet-stream" }));
  const link = h("a", { href: url, download: fileName });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function shellQuote(text) { return "'" + String(text).replace(/'/g, "'\\''") + "'"; }

// MARK: The admin API

class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** A request to the admin server with the session cookie; changes carry the anti-forgery token. */
async function api(method, path, body) {
  const headers = {};
  if (method !== "GET") headers["X-CSRF-Token"] = state.csrf || "";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!response.ok) {
    if (response.status === 401 && !path.startsWith("/console/session")) { showSignIn("Your session ended: sign in again."); }
    throw new APIError(response.status, (json && json.error && json.error.message) || response.status + " " + response.statusText);
  }
  return json;
}

function failed(error) { say(error.message || String(error), true); }

// MARK: Pages

const pages = { overview, send, lookup, inbox, faults, provisioning };

function stopPage() {
  for (const timer of state.timers) clearInterval(timer);
  state.timers = [];
  if (state.stream) { state.stream.close(); state.stream = null; }
}

/** Replaces a container's content, unless what it shows has not changed (so focus and selection stay). */
function show(container, key, build) {
  if (container.dataset.shown === key) return;
  container.dataset.shown = key;
  container.replaceChildren(build());
}

function every(milliseconds, work) {
  work();
  state.timers.push(setInterval(work, milliseconds));
}

function route() {
  if (!state.csrf) return;
  stopPage();
  state.page += 1;
  const [name, queryText] = (location.hash.slice(1) || "overview").split("?");
  const known = Object.hasOwn(pages, name);
  const page = known ? pages[name] : overview;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === "#" + (known ? name : "overview")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.getElementById("status").textContent = "";
  const main = document.getElementById("main");
  main.replaceChildren();
  page(main, new URLSearchParams(queryText || ""));
}

function showSignIn(message) {
  stopPage();
  state.csrf = null;
  document.getElementById("nav").hidden = true;
  const token = h("input", { type: "password", name: "token", autocomplete: "current-password", required: true, spellcheck: "false" });
  const note = h("p", { class: "bad", role: "alert" }, message || "");
  const form = h("form", { id: "sign-in", onsubmit: async (event) => {
    event.preventDefault();
    try {
      const session = await api("POST", "/console/session", { token: token.value });
      token.value = "";
      signedIn(session);
    } catch (error) { note.textContent = error.message; }
  } },
    field("Admin token", token),
    h("p", { class: "hint" }, "The token is in the data directory's admin-token file and in the start-up banner."),
    h("button", { type: "submit" }, "Sign in"), note);
  document.getElementById("main").replaceChildren(h("section", { class: "signin" }, h("h2", {}, "Sign in to Courier"), form));
  token.focus();
}

function signedIn(session) {
  state.csrf = session.csrf;
  document.getElementById("nav").hidden = false;
  route();
}

// MARK: Overview

function parseMetrics(text) {
  const sums = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$/.exec(line);
    if (!match) continue;
    sums[match[1]] = (sums[match[1]] || 0) + Number(match[3]);
  }
  return sums;
}

/**
 * The last minute of one or more series, a value a second, the newest at the right ("now"), with
 * a time axis under it and the legend above. Drawn from the first second, before there is a value.
 * A later series is drawn thinner over an earlier one, so that equal lines both show.
 */
function drawChart(canvas, series, unit) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio; canvas.height = height * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const left = 44, right = width - 6, top = 20, bottom = height - 18;
  const values = series.flatMap((s) => s.values);
  const highest = (Math.max(0, ...values) || 1) * 1.15;
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#5b6470";
  g.strokeStyle = "#d6dbe1";
  g.lineWidth = 1;
  for (let i = 0; i <= 2; i++) {
    const y = top + (bottom - top) * i / 2;
    g.beginPath(); g.moveTo(left, y); g.lineTo(right, y); g.stroke();
    g.fillText(formatNumber(highest * (1 - i / 2)) + unit, 0, y + 4);
  }
  // The time axis: a minute ago to now.
  for (const [seconds, label] of [[60, "−60 s"], [30, "−30 s"], [0, "now"]]) {
    const x = left + (right - left) * (60 - seconds) / 60;
    g.beginPath(); g.moveTo(x, bottom); g.lineTo(x, bottom + 4); g.stroke();
    g.textAlign = seconds === 60 ? "left" : seconds === 0 ? "right" : "center";
    g.fillText(label, x, height - 2);
  }
  g.textAlign = "left";
  if (!values.length) g.fillText("collecting…", left + 6, top + (bottom - top) / 2);
  series.forEach((s, index) => {
    g.strokeStyle = s.color; g.lineWidth = index === 0 ? 4 : 2; g.beginPath();
    const n = s.values.length;
    s.values.forEach((v, i) => {
      const x = left + (right - left) * (60 - (n - 1 - i)) / 60;
      const y = top + (bottom - top) * (1 - v / highest);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
    g.fillStyle = s.color;
    g.fillRect(left + index * 110, 6, 10, 4);
    g.fillText(s.name, left + 14 + index * 110, 12);
  });
}

function formatNumber(value) {
  if (value >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (value >= 1e4) return (value / 1e3).toFixed(0) + "k";
  if (value >= 10) return value.toFixed(0);
  return value.toFixed(value >= 1 ? 1 : 2);
}

function overview(main) {
  const figures = {};
  const figure = (key, label) => { figures[key] = h("div", { class: "value", text: "–" }); return h("div", { class: "figure" }, figures[key], h("div", { class: "label" }, label)); };
  const rateCanvas = h("canvas", { role: "img", "aria-label": "notifications received and delivered per second, last minute" });
  const latencyCanvas = h("canvas", { role: "img", "aria-label": "mean time from acceptance to the device, milliseconds, last minute" });
  const listeners = h("div");
  const refusals = h("div");
  main.append(
    h("h2", {}, "Overview"),
    h("div", { class: "grid" }, figure("rate", "notifications / s (received)"), figure("delivered", "delivered / s"), figure("online", "devices online"),
      figure("held", "notifications held"), figure("inbox", "inbox entries"), figure("backlog", "delivery-log backlog")),
    h("div", { class: "charts" },
      h("section", {}, h("h3", {}, "Rate, last minute"), rateCanvas),
      h("section", {}, h("h3", {}, "Accept-to-device latency (mean), last minute"), latencyCanvas)),
    h("section", {}, h("h3", {}, "Listeners"), listeners),
    h("section", {}, h("h3", {}, "Refusals in the last 10 minutes, by reason"), refusals));

  const history = { received: [], delivered: [], latency: [] };
  const draw = () => {
    drawChart(rateCanvas, [{ name: "received", color: "#0b5cad", values: history.received }, { name: "delivered", color: "#17733a", values: history.delivered }], "/s");
    drawChart(latencyCanvas, [{ name: "latency", color: "#b45309", values: history.latency }], " ms");
  };
  draw();
  let previous = null;
  every(1000, async () => {
    try {
      const text = await (await fetch("/metrics", { credentials: "same-origin" })).text();
      const now = parseMetrics(text);
      now.at = performance.now();
      if (previous) {
        const seconds = (now.at - previous.at) / 1000;
        const rate = (name) => Math.max(0, ((now[name] || 0) - (previous[name] || 0)) / seconds);
        const count = (now.courier_delivery_latency_seconds_count || 0) - (previous.courier_delivery_latency_seconds_count || 0);
        const sum = (now.courier_delivery_latency_seconds_sum || 0) - (previous.courier_delivery_latency_seconds_sum || 0);
        const push = (list, value) => { list.push(value); if (list.length > 60) list.shift(); };
        push(history.received, rate("courier_notifications_received_total"));
        push(history.delivered, rate("courier_notifications_delivered_total"));
        push(history.latency, count > 0 ? 1000 * sum / count : 0);
        figures.rate.textContent = formatNumber(history.received[history.received.length - 1]);
        figures.delivered.textContent = formatNumber(history.delivered[history.delivered.length - 1]);
        draw();
      }
      previous = now;
    } catch (error) { failed(error); }
  });
  every(2000, async () => {
    try {
      const status = await api("GET", "/v1/status");
      state.status = status;
      figures.online.textContent = status.devicesOnline;
      figures.held.textContent = status.notificationsHeld;
      figures.inbox.textContent = status.inbox.entries + " / " + status.inbox.capacity;
      figures.backlog.textContent = status.deliveryLogBacklog;
      const rows = Object.keys(status.listeners).sort().map((name) => {
        const [kind, environment] = name.split(".");
        return h("tr", {}, h("td", {}, kind), h("td", {}, environment || ""), h("td", { class: "mono" }, status.listeners[name]),
          h("td", {}, name in status.connections ? status.connections[name] : "–"));
      });
      show(listeners, JSON.stringify([status.listeners, status.connections]), () => table(["listener", "environment", "port", "connections"], rows));
    } catch (error) { failed(error); }
  });
  every(5000, async () => {
    try {
      const since = Math.floor(Date.now() / 1000) - 600;
      const page = await api("GET", "/v1/inbox?outcome=refused&limit=1000&since=" + since);
      const counts = new Map();
      for (const entry of page.entries) {
        const key = (entry.outcome.reason || "?") + (entry.outcome.status ? " (" + entry.outcome.status + ")" : "");
        counts.set(key, (counts.get(key) || 0) + 1);
      }
      const rows = [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([reason, n]) =>
        h("tr", {}, h("td", {}, reason), h("td", {}, n), h("td", {}, h("a", { href: "#inbox?outcome=" + encodeURIComponent(reason.split(" (")[0]) }, "in the inbox"))));
      show(refusals, JSON.stringify([...counts.entries()]), () => rows.length ? table(["reason", "refusals", ""], rows) : h("p", { class: "muted" }, "None."));
    } catch (error) { failed(error); }
  });
}

// MARK: Send

const pushTypes = ["alert", "background", "voip", "location", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk", "widgets", "controls"];

async function loadTeams() {
  state.teams = (await api("GET", "/v1/teams")).teams;
  return state.teams;
}

function send(main) {
  // Production, as the banner's commands; the environment of the devices online once they are known.
  const environment = h("select", { name: "environment" }, options(["production", "sandbox"], "production"));
  const team = h("select", { name: "team" });
  const app = h("select", { name: "app" });
  const topic = h("select", { name: "topic" });
  const device = h("select", { name: "device" }, h("option", { value: "" }, "— enter a token —"));
  const token = h("input", { name: "token", class: "mono", placeholder: "hex", spellcheck: "false", autocomplete: "off" });
  const pushType = h("select", { name: "pushType" }, options(pushTypes, "alert"));
  const priority = h("select", { name: "priority" }, options([["", "not set (10)"], "10", "5", "1"], ""));
  const expiration = h("input", { name: "expiration", type: "number", min: "0", step: "1", placeholder: "not set", autocomplete: "off" });
  const collapseID = h("input", { name: "collapseID", maxlength: "64", autocomplete: "off" });
  const apnsID = h("input", { name: "apnsID", class: "mono", placeholder: "made by the server", autocomplete: "off" });
  const payload = h("textarea", { name: "payload", spellcheck: "false" });
  payload.value = JSON.stringify({ aps: { alert: { title: "Hello", body: "From the Courier console" } } }, null, 2);
  const payloadCheck = h("p", { class: "hint", id: "payload-check", "aria-live": "polite" });
  const answer = h("div", { id: "answer", "aria-live": "polite" });
  const commands = h("div", { id: "commands" });
  const sendButton = h("button", { type: "submit" }, "Send");

  const selectedTeam = () => state.teams.find((t) => t.id === team.value);
  const selectedApp = () => (selectedTeam() ? selectedTeam().apps : []).find((a) => a.bundleID === app.value);
  const limit = () => {
    const limits = (state.status && state.status.payloadLimits) || { http2: 4096, http2VoIP: 5120 };
    return topic.value.endsWith(".voip") ? limits.http2VoIP : limits.http2;
  };
  function checkPayload() {
    const size = new TextEncoder().encode(payload.value).length;
    let problem = "";
    try { const value = JSON.parse(payload.value); if (typeof value !== "object" || value === null || Array.isArray(value)) problem = "not a JSON object"; }
    catch (error) { problem = "not JSON: " + error.message; }
    payloadCheck.textContent = size + " of " + limit() + " bytes" + (problem ? " — " + problem : " — valid JSON");
    payloadCheck.className = "hint " + (problem || size > limit() ? "bad" : "ok");
    showCommands();
  }
  function fillApps() {
    const apps = selectedTeam() ? selectedTeam().apps : [];
    app.replaceChildren(...options(apps.map((a) => a.bundleID)));
    fillTopics();
  }
  function fillTopics() {
    const a = selectedApp();
    topic.replaceChildren(...options(a ? a.topics.map((t) => t.topic || t) : []));
    fillDevices();
  }
  let devices = [];
  function fillDevices() {
    const chosen = device.value;
    const rows = [];
    for (const d of devices) {
      if (d.environment !== environment.value) continue;
      for (const r of d.registrations) if (r.active && r.bundleID === app.value) rows.push([r.token, "device " + d.deviceID + " (" + r.token.slice(0, 12) + "…)"]);
    }
    device.replaceChildren(h("option", { value: "" }, "— enter a token —"), ...options(rows, chosen));
    if (device.value) token.value = device.value;
    checkPayload();
  }
  function body() {
    const value = { environment: environment.value, team: team.value, topic: topic.value, token: token.value.trim(), payload: payload.value, pushType: pushType.value };
    if (priority.value) value.priority = Number(priority.value);
    if (expiration.value.trim() !== "") value.expiration = Number(expiration.value.trim());
    if (collapseID.value) value.collapseID = collapseID.value;
    if (apnsID.value.trim()) value.apnsID = apnsID.value.trim();
    return value;
  }
  function showCommands() {
    const b = body();
    const port = state.status && state.status.listeners["http2." + b.environment];
    const host = location.hostname;
    const headers = [["apns-topic", b.topic], ["apns-push-type", b.pushType]];
    if (b.priority) headers.push(["apns-priority", b.priority]);
    if (b.expiration !== undefined) headers.push(["apns-expiration", b.expiration]);
    if (b.collapseID) headers.push(["apns-collapse-id", b.collapseID]);
    if (b.apnsID) headers.push(["apns-id", b.apnsID]);
    const curl = ["curl --http2 --cacert courier-data/pki/ca.pem \\", "  --cert PROVIDER-CERT.pem --key PROVIDER-KEY.pem \\"]
      .concat(headers.map(([n, v]) => "  -H " + shellQuote(n + ": " + v) + " \\"))
      .concat(["  --data-binary " + shellQuote(b.payload) + " \\", "  " + shellQuote("https://" + host + ":" + (port || "PORT") + "/3/device/" + (b.token || "TOKEN"))]).join("\n");
    const courier = ["courier push --p8 AuthKey_KEYID.p8 --team-id " + shellQuote(b.team || "TEAMID") + " --ca courier-data/pki/ca.pem \\",
      "  --host " + host + " --port " + (port || "PORT") + (b.environment === "sandbox" ? " --sandbox" : "") + " \\",
      "  --topic " + shellQuote(b.topic) + " --push-type " + shellQuote(b.pushType) + (b.priority ? " --priority " + b.priority : "") +
        (b.expiration !== undefined ? " --expiration " + b.expiration : "") + (b.collapseID ? " --collapse-id " + shellQuote(b.collapseID) : "") +
        (b.apnsID ? " --id " + shellQuote(b.apnsID) : "") + " \\",
      "  --token " + shellQuote(b.token || "TOKEN") + " --payload " + shellQuote(b.payload)].join("\n");
    const copyable = (title, text, id) => {
      const pre = h("pre", { id, tabindex: "0" }, text);
      return h("div", {}, h("div", { class: "actions" }, h("h3", {}, title),
        h("button", { type: "button", class: "secondary", onclick: () => navigator.clipboard.writeText(text).then(() => say("Copied."), failed) }, "Copy")), pre);
    };
    commands.replaceChildren(
      copyable("The same push with curl (certificate trust)", curl, "curl-command"),
      copyable("With courier push (token trust)", courier, "courier-command"));
  }

  const form = h("form", { class: "fields", id: "send-form", onsubmit: async (event) => {
    event.preventDefault();
    sendButton.disabled = true;
    try {
      const result = await api("POST", "/v1/push", body());
      const link = h("a", { href: "#lookup?id=" + result.apnsID, id: "answer-link" }, result.apnsID);
      answer.replaceChildren(h("p", { class: "answer " + (result.status === 200 ? "ok" : "bad"), id: "answer-status" },
        String(result.status), result.reason ? " " + result.reason : " accepted", result.fault ? " (fault rule " + result.fault + ")" : "", " — apns-id ", link,
        result.apnsUniqueID ? " (apns-unique-id " + result.apnsUniqueID + ")" : ""));
    } catch (error) {
      answer.replaceChildren(h("p", { class: "answer bad", id: "answer-status" }, error.message));
    } finally { sendButton.disabled = false; }
  } },
    field("Environment", environment), field("Team", team), field("App", app), field("Topic", topic),
    field("Device online", device), field("Device token", token),
    field("Push type", pushType), field("Priority", priority),
    field("Expiration (seconds since 1970; 0: now or never)", expiration), field("Collapse id", collapseID), field("apns-id (optional)", apnsID),
    h("div", { class: "wide" }, field("Payload (JSON)", payload), payloadCheck),
    h("div", { class: "wide actions" }, sendButton,
      h("button", { type: "button", class: "secondary", onclick: () => { expiration.value = String(Math.floor(Date.now() / 1000) + 3600); showCommands(); } }, "Expire in an hour")));
  main.append(h("h2", {}, "Send a test push"),
    h("section", {}, h("p", { class: "hint" }, "Sent over Courier's own HTTP/2 port with an auth key the console makes for the team, so it is checked, recorded and delivered as any provider's push."), form, answer),
    h("section", {}, commands));

  environment.addEventListener("change", fillDevices);
  team.addEventListener("change", fillApps);
  app.addEventListener("change", fillTopics);
  topic.addEventListener("change", checkPayload);
  device.addEventListener("change", () => { if (device.value) token.value = device.value; showCommands(); });
  for (const control of [token, pushType, priority, expiration, collapseID, apnsID]) control.addEventListener("input", showCommands);
  payload.addEventListener("input", checkPayload);

  (async () => {
    try {
      if (!state.status) state.status = await api("GET", "/v1/status");
      await loadTeams();
      team.replaceChildren(...options(state.teams.map((t) => [t.id, t.id + " — " + t.name])));
      fillApps();
      devices = (await api("GET", "/v1/devices")).devices;
      const online = [...new Set(devices.map((d) => d.environment))];
      if (online.length === 1) environment.value = online[0];
      fillDevices();
    } catch (error) { failed(error); }
  })();
  checkPayload();
}

// MARK: Look up

function renderEntry(entry) {
  const outcome = entry.outcome.accepted ? h("span", { class: "ok" }, "accepted") :
    h("span", { class: "bad" }, [entry.outcome.status, entry.outcome.reason].filter((x) => x !== undefined && x !== null).join(" "));
  return h("tr", {},
    h("td", { class: "mono" }, entry.sequence), h("td", {}, shortTime(entry.receivedAt)), h("td", {}, entry.interface + " " + entry.environment),
    h("td", { class: "words" }, breakable(entry.topic || "")), h("td", { class: "mono words" }, entry.token ? h("a", { href: "#lookup?token=" + entry.token }, entry.token.slice(0, 16) + "…") : entryTarget(entry)),
    h("td", {}, outcome, entry.fault ? " (fault " + entry.fault + ")" : ""),
    h("td", { class: "mono" }, h("a", { href: "#lookup?id=" + entry.apnsID }, entry.apnsID)),
    h("td", { class: "payload" }, entry.payload !== undefined && entry.payload !== null ? entry.payload : "(" + entry.payloadSize + " bytes, not UTF-8)"));
}

const entryHeaders = ["#", "received", "interface", "topic", "token", "outcome", "apns-id", "payload"];

// Not a notification to a token: a broadcast or a channel management request, named with its method and path.
function entryTarget(entry) {
  if (!entry.kind || entry.kind === "notification") return "";
  const header = (name) => (entry.headers.find((x) => x.name === name) || {}).value || "";
  return h("span", { class: "muted" }, entry.kind + " " + header(":method") + " " + header(":path"));
}

function renderTimeline(timeline) {
  return h("div", { class: "card timeline-card" },
    h("h3", {}, "apns-id ", h("span", { class: "mono" }, timeline.apnsID), timeline.app ? " of " + timeline.app : ""),
    timeline.received.length ? table(entryHeaders, timeline.received.map(renderEntry)) : h("p", { class: "muted" }, "Not in the inbox."),
    timeline.events.length
      ? h("ol", { class: "timeline" }, timeline.events.map((e, i) => h("li", { class: "event-" + e.event }, h("strong", {}, e.event), " ", h("span", { class: "muted" }, shortTime(e.at)),
        // Each step's duration: the time since the step before (and, from the second on, since the first).
        i > 0 ? h("span", { class: "step" }, " +" + elapsed(timeline.events[i - 1].at, e.at) + (i > 1 ? " (" + elapsed(timeline.events[0].at, e.at) + " in all)" : "")) : "",
        e.detail ? " — " + e.detail : "")))
      : h("p", { class: "muted" }, "No delivery events yet."));
}

function lookup(main, query) {
  const id = h("input", { name: "apns-id", class: "mono", value: query.get("id") || "", placeholder: "apns-id or apns-unique-id", autocomplete: "off" });
  const app = h("input", { name: "app", value: query.get("app") || "", placeholder: "when two apps used the apns-id", autocomplete: "off" });
  const token = h("input", { name: "token", class: "mono", value: query.get("token") || "", placeholder: "hex", autocomplete: "off" });
  const result = h("div", { id: "lookup-result" });
  main.append(h("h2", {}, "Look up"),
    h("section", {},
      h("form", { class: "fields", onsubmit: (event) => {
        event.preventDefault();
        location.hash = "#lookup?id=" + encodeURIComponent(id.value.trim()) + (app.value.trim() ? "&app=" + encodeURIComponent(app.value.trim()) : "");
      } },
        field("Notification (apns-id)", id), field("App (bundle id, optional)", app), h("div", {}, h("button", { type: "submit" }, "Show its timeline"))),
      h("form", { class: "fields", onsubmit: (event) => { event.preventDefault(); location.hash = "#lookup?token=" + encodeURIComponent(token.value.trim()); } },
        field("Device token", token), h("div", {}, h("button", { type: "submit" }, "Show its notifications")))),
    result);
  if (query.get("id")) {
    // Watched: the timeline refreshes while the page is open.
    every(1000, async () => {
      try {
        const of = query.get("app") ? "?app=" + encodeURIComponent(query.get("app")) : "";
        const timeline = await api("GET", "/v1/notifications/" + encodeURIComponent(query.get("id")) + of);
        show(result, JSON.stringify(timeline), () => renderTimeline(timeline));
      } catch (error) { show(result, error.message, () => h("p", { class: "bad" }, error.message)); }
    });
  } else if (query.get("token")) {
    every(2000, async () => {
      try {
        const answer = await api("GET", "/v1/tokens/" + encodeURIComponent(query.get("token")) + "/notifications");
        show(result, JSON.stringify(answer), () => answer.notifications.length ? h("div", {}, answer.notifications.map(renderTimeline)) : h("p", { class: "muted" }, "No notifications for this token in the inbox."));
      } catch (error) { show(result, error.message, () => h("p", { class: "bad" }, error.message)); }
    });
  }
}

// MARK: Inbox

const inboxFilters = ["topic", "token", "apns-id", "team", "interface", "kind", "environment", "outcome"];

function inbox(main, query) {
  const inputs = {};
  for (const name of inboxFilters) {
    inputs[name] = name === "interface" ? h("select", { name }, options([["", "any"], "http2", "binary"], query.get(name) || ""))
      : name === "environment" ? h("select", { name }, options([["", "any"], "production", "sandbox"], query.get(name) || ""))
      : name === "kind" ? h("select", { name }, options([["", "any"], "notification", "broadcast", ["channel", "channel management"], "other"], query.get(name) || ""))
      : h("input", { name, value: query.get(name) || "", autocomplete: "off", placeholder: name === "outcome" ? "accepted, refused or a reason" : "" });
  }
  const body = h("tbody", { id: "tail" });
  const state_ = h("p", { class: "hint", id: "tail-state", "aria-live": "polite" });
  const form = h("form", { class: "fields", onsubmit: (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    for (const name of inboxFilters) if (inputs[name].value.trim()) params.set(name, inputs[name].value.trim());
    const hash = "#inbox" + (params.toString() ? "?" + params : "");
    // The same filters again: no hashchange, so the tail starts over here.
    if (location.hash === hash) route(); else location.hash = hash;
  } },
    inboxFilters.map((name) => field(name, inputs[name])),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Apply"),
      h("button", { type: "button", class: "danger", onclick: async () => {
        try { const answer = await api("DELETE", "/v1/inbox"); body.replaceChildren(); say("Cleared " + answer.cleared + " entries."); } catch (error) { failed(error); }
      } }, "Clear the inbox")));
  main.append(h("h2", {}, "Inbox — live"), h("section", {}, form, state_),
    h("section", {}, h("div", { class: "table" }, h("table", {}, h("thead", {}, h("tr", {}, entryHeaders.map((t) => h("th", { scope: "col" }, t)))), body))));

  const page = state.page;
  (async () => {
    try {
      const params = new URLSearchParams();
      for (const name of inboxFilters) if (query.get(name)) params.set(name, query.get(name));
      // What matches among the last 100 entries received, then each new one.
      const last = (await api("GET", "/v1/inbox?limit=1")).last;
      if (page !== state.page) return; // left the page meanwhile
      params.set("after", String(Math.max(0, last - 100)));
      const stream = new EventSource("/v1/inbox/stream?" + params, { withCredentials: true });
      state.stream = stream;
      let newest = 0;
      stream.addEventListener("open", () => { state_.textContent = "Live: new notifications appear at the top."; });
      stream.addEventListener("error", async () => {
        state_.textContent = "The live tail is reconnecting…";
        // A session that ended gets the sign-in, not endless reconnections.
        try { await api("GET", "/console/session"); } catch (error) { if (error.status === 401) showSignIn("Your session ended: sign in again."); }
      });
      stream.addEventListener("entry", (event) => {
        const entry = JSON.parse(event.data);
        if (entry.sequence <= newest) return;
        newest = entry.sequence;
        body.prepend(renderEntry(entry));
        while (body.children.length > 500) body.lastElementChild.remove();
      });
    } catch (error) { failed(error); }
  })();
}

// MARK: Faults

function faults(main) {
  const list = h("div", { id: "fault-list" });
  const match = {};
  for (const name of ["token", "topic", "team", "keyID", "certificateSerial"]) match[name] = h("input", { name: "match-" + name, autocomplete: "off" });
  match.interface = h("select", { name: "match-interface" }, options([["", "any"], "http2", "binary"], ""));
  match.environment = h("select", { name: "match-environment" }, options([["", "any"], "production", "sandbox"], ""));
  const action = h("select", { name: "action" }, options(["reject", "delay", "close"], "reject"));
  const reason = h("input", { name: "reason", list: "reasons", autocomplete: "off", placeholder: "BadDeviceToken" });
  const reasons = h("datalist", { id: "reasons" }, options(["BadDeviceToken", "Unregistered", "TooManyRequests", "InternalServerError", "ServiceUnavailable",
    "Shutdown", "ExpiredProviderToken", "InvalidProviderToken", "DeviceTokenNotForTopic", "PayloadTooLarge", "TopicDisallowed", "BadCertificate"]));
  const milliseconds = h("input", { name: "milliseconds", type: "number", min: "1", max: "60000", step: "1", autocomplete: "off" });
  const count = h("input", { name: "count", type: "number", min: "1", step: "1", autocomplete: "off" });
  const seconds = h("input", { name: "seconds", type: "number", min: "1", step: "any", autocomplete: "off" });
  async function refresh() {
    try {
      const answer = await api("GET", "/v1/faults");
      show(list, JSON.stringify(answer.faults), () => answer.faults.length ? table(["id", "match", "action", "left", "hits", ""], answer.faults.map((rule) => {
        const matchText = Object.entries(rule.match).map(([k, v]) => k + "=" + v).join(", ") || "every notification";
        const actionText = rule.action + (rule.reason ? " " + rule.reason : "") + (rule.milliseconds ? " " + rule.milliseconds + " ms" : "");
        const left = [rule.remaining !== undefined && rule.remaining !== null ? rule.remaining + " more" : "", rule.until ? "until " + shortTime(rule.until) : ""].filter(Boolean).join(", ") || "until removed";
        return h("tr", {}, h("td", { class: "mono" }, rule.id), h("td", { class: "wrap" }, matchText), h("td", {}, actionText), h("td", {}, left), h("td", {}, rule.hits),
          h("td", {}, h("button", { type: "button", class: "danger", "aria-label": "Remove rule " + rule.id, onclick: async () => {
            try { await api("DELETE", "/v1/faults/" + encodeURIComponent(rule.id)); say("Removed " + rule.id + "."); refresh(); } catch (error) { failed(error); }
          } }, "Remove")));
      })) : h("p", { class: "muted" }, "No fault rules: every notification is handled as usual."));
    } catch (error) { failed(error); }
  }
  const form = h("form", { class: "fields", id: "fault-form", onsubmit: async (event) => {
    event.preventDefault();
    const rule = { match: {}, action: action.value };
    for (const [name, control] of Object.entries(match)) if (control.value.trim()) rule.match[name] = control.value.trim();
    if (reason.value.trim()) rule.reason = reason.value.trim();
    for (const [name, control] of [["milliseconds", milliseconds], ["count", count], ["seconds", seconds]]) {
      if (!control.value.trim()) continue;
      const value = Number(control.value);
      if (!Number.isFinite(value)) { failed(new Error("'" + name + "' must be a number")); return; }
      rule[name] = value;
    }
    try { const added = await api("POST", "/v1/faults", rule); say("Added " + added.id + "."); refresh(); } catch (error) { failed(error); }
  } },
    field("Token", match.token), field("Topic", match.topic), field("Team", match.team), field("Key id", match.keyID), field("Certificate serial", match.certificateSerial),
    field("Interface", match.interface), field("Environment", match.environment),
    field("Action", action), field("Reason", reason), reasons, field("Delay (ms)", milliseconds), field("Count (then it ends)", count), field("Seconds (then it ends)", seconds),
    h("div", { class: "wide" }, h("button", { type: "submit" }, "Add the rule")));
  main.append(h("h2", {}, "Faults"), h("section", {}, h("h3", {}, "Rules in force"), list),
    h("section", {}, h("h3", {}, "Add a rule"), h("p", { class: "hint" }, "Every field given must match; none matches every notification."), form));
  every(3000, refresh);
}

// MARK: Provisioning

/** A tar archive (ustar) of text files: the device's identity folder. */
function tar(files) {
  const encoder = new TextEncoder();
  const blocks = [];
  const octal = (value, length) => value.toString(8).padStart(length - 1, "0") + "\0";
  for (const file of files) {
    const data = encoder.encode(file.content);
    const header = new Uint8Array(512);
    const put = (text, offset) => header.set(encoder.encode(text), offset);
    put(file.name, 0);
    put(octal(file.mode || 0o644, 8), 100);
    put(octal(0, 8), 108); put(octal(0, 8), 116);
    put(octal(data.length, 12), 124);
    put(octal(Math.floor(Date.now() / 1000), 12), 136);
    put("        ", 148);
    put(file.directory ? "5" : "0", 156);
    put("ustar\0" + "00", 257);
    let sum = 0;
    for (const byte of header) sum += byte;
    put(sum.toString(8).padStart(6, "0") + "\0 ", 148);
    blocks.push(header, data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  return new Blob(blocks, { type: "application/x-tar" });
}

function provisioning(main) {
  const teams = h("div", { id: "teams" });
  const certificates = h("div", { id: "certificates" });
  const devices = h("div", { id: "devices" });
  async function refresh() {
    try {
      await loadTeams();
      fillPicks();
      show(teams, JSON.stringify(state.teams), () => state.teams.length ? table(["team", "apps", "auth keys", ""], state.teams.map((team) => h("tr", {},
        h("td", {}, h("span", { class: "mono" }, team.id), " ", team.name),
        h("td", { class: "wrap" }, team.apps.map((a) => a.bundleID).join(", ") || "—"),
        h("td", {}, team.authKeys.length ? team.authKeys.map((k) => h("div", {}, h("span", { class: "mono" }, k.keyID),
          k.usedByConsole ? h("span", { class: "muted", title: "made by this console to send its test pushes for the team; kept in the data directory's console/ folder" }, " (the console's, for Send)") : "",
          k.revokedAt ? h("span", { class: "bad" }, " revoked") :
          h("button", { type: "button", class: "danger", "aria-label": "Revoke key " + k.keyID, onclick: async () => {
            if (!confirm("Revoke auth key " + k.keyID + "? Its tokens stop working at once.")) return;
            try { await api("POST", "/v1/keys/" + encodeURIComponent(k.keyID) + "/revoke"); say("Revoked " + k.keyID + "."); refresh(); } catch (error) { failed(error); }
          } }, "Revoke"))) : "—"),
        h("td", {}, h("button", { type: "button", class: "secondary", "aria-label": "New auth key for " + team.id, onclick: async () => {
          try {
            const key = await api("POST", "/v1/teams/" + encodeURIComponent(team.id) + "/keys");
            download(key.fileName, key.p8, "application/x-pem-file");
            say("Downloaded " + key.fileName + ": Courier does not keep it, keep it safe.");
            refresh();
          } catch (error) { failed(error); }
        } }, "New auth key (.p8)"))))) : h("p", { class: "muted" }, "No teams yet."));
      const list = (await api("GET", "/v1/certificates")).certificates.filter((c) => c.kind !== "authority");
      show(certificates, JSON.stringify(list), () => table(["serial", "kind", "subject", "environments", "valid until", ""], list.map((c) => h("tr", {},
        h("td", { class: "mono wrap" }, c.serial), h("td", {}, c.kind), h("td", { class: "wrap" }, c.subject), h("td", {}, c.environments.join(", ")),
        h("td", {}, shortTime(c.notAfter)),
        h("td", { class: "actions" },
          h("button", { type: "button", class: "secondary", "aria-label": "Download certificate " + c.serial, onclick: () => download(c.serial + ".pem", c.certificatePEM, "application/x-pem-file") }, "Download"),
          c.revokedAt ? h("span", { class: "bad" }, "revoked") : c.kind === "server" ? null :
            h("button", { type: "button", class: "danger", "aria-label": "Revoke certificate " + c.serial, onclick: async () => {
              if (!confirm("Revoke certificate " + c.serial + "? Its connections close at once.")) return;
              try { await api("POST", "/v1/certificates/" + encodeURIComponent(c.serial) + "/revoke"); say("Revoked " + c.serial + "."); refresh(); } catch (error) { failed(error); }
            } }, "Revoke"))))));
      const online = await api("GET", "/v1/devices");
      show(devices, JSON.stringify(online.devices), () => online.devices.length ? table(["device", "environment", "connected", "apps"], online.devices.map((d) => h("tr", {},
        h("td", { class: "mono" }, d.deviceID), h("td", {}, d.environment), h("td", {}, shortTime(d.connectedAt)),
        h("td", { class: "wrap" }, d.registrations.filter((r) => r.active).map((r) => h("div", {}, r.bundleID + " ", h("a", { class: "mono", href: "#lookup?token=" + r.token }, r.token.slice(0, 16) + "…"))))))) :
        h("p", { class: "muted" }, "No device is connected."));
    } catch (error) { failed(error); }
  }

  const teamID = h("input", { name: "team-id", maxlength: "10", class: "mono", autocomplete: "off", placeholder: "ABCDE12345" });
  const teamName = h("input", { name: "team-name", autocomplete: "off" });
  const bundleID = h("input", { name: "bundle-id", autocomplete: "off", placeholder: "com.example.app" });
  const appTeam = h("select", { name: "app-team" });
  const certApp = h("select", { name: "cert-app" });
  // The teams and apps there are, as pick lists; rebuilt only when they change (an open list stays open).
  let picked = "";
  function fillPicks() {
    const teamsList = state.teams.map((t) => [t.id, t.id + " — " + t.name]);
    const appsList = state.teams.flatMap((t) => t.apps.map((a) => a.bundleID));
    const now = JSON.stringify([teamsList, appsList]);
    if (now === picked) return;
    picked = now;
    appTeam.replaceChildren(...options(teamsList, appTeam.value));
    certApp.replaceChildren(...options(appsList, certApp.value));
    virtual.fillApps(appsList);
  }
  const certEnvironments = h("select", { name: "cert-environments" }, options([["both", "production and sandbox"], "production", "sandbox"], "both"));
  const virtual = virtualDevices();
  main.append(h("h2", {}, "Provisioning"),
    h("section", {}, h("h3", {}, "Teams, apps and auth keys"), teams,
      h("form", { class: "fields", onsubmit: async (event) => {
        event.preventDefault();
        try {
          await api("POST", "/v1/teams", { id: teamID.value.trim(), name: teamName.value.trim() });
          say("Team " + teamID.value + " created.");
          teamID.value = ""; teamName.value = "";
          refresh();
        } catch (error) { failed(error); }
      } }, field("New team id", teamID), field("Name", teamName), h("div", {}, h("button", { type: "submit" }, "Create the team"))),
      h("form", { class: "fields", onsubmit: async (event) => {
        event.preventDefault();
        try {
          await api("POST", "/v1/apps", { bundleID: bundleID.value.trim(), teamID: appTeam.value.trim() });
          say("App " + bundleID.value + " created.");
          bundleID.value = "";
          refresh();
        } catch (error) { failed(error); }
      } }, field("New app's bundle id", bundleID), field("Its team", appTeam), h("div", {}, h("button", { type: "submit" }, "Create the app")))),
    h("section", {}, h("h3", {}, "Certificates"), certificates,
      h("form", { class: "fields", onsubmit: async (event) => {
        event.preventDefault();
        const environments = certEnvironments.value === "both" ? ["production", "sandbox"] : [certEnvironments.value];
        try {
          const issued = await api("POST", "/v1/apps/" + encodeURIComponent(certApp.value.trim()) + "/certificates", { environments });
          download(certApp.value.trim() + ".pem", issued.certificatePEM, "application/x-pem-file");
          download(certApp.value.trim() + "-key.pem", issued.keyPEM, "application/x-pem-file");
          say("Downloaded the certificate and its key: Courier does not keep the key.");
          refresh();
        } catch (error) { failed(error); }
      } }, field("Provider certificate for app", certApp), field("Environments", certEnvironments), h("div", {}, h("button", { type: "submit" }, "Issue and download")))),
    virtual.section,
    h("section", {}, h("h3", {}, "Devices online"), devices,
      h("div", { class: "actions" }, h("button", { type: "button", onclick: async () => {
        try {
          const device = await api("POST", "/v1/devices");
          const folder = "device-" + device.deviceID + "/";
          download("device-" + device.deviceID + ".tar", tar([
            { name: folder, content: "", directory: true, mode: 0o755 },
            { name: folder + "cert.pem", content: device.certificatePEM },
            { name: folder + "key.pem", content: device.keyPEM, mode: 0o600 },
            { name: folder + "ca.pem", content: device.caPEM },
            { name: folder + "identity.json", content: typeof device.identity === "string" ? device.identity : JSON.stringify(device.identity, null, 2) }]));
          say("Downloaded device-" + device.deviceID + ".tar: tar xf it, then courier device run --identity " + folder);
        } catch (error) { failed(error); }
      } }, "Activate a device (download its identity folder)"))));
  every(5000, refresh);
  every(5000, virtual.refresh);
}

/** Virtual devices (docs/virtual-devices.md): an app's own Apple tokens, registered, listed, set offline or uninstalled, removed. */
function virtualDevices() {
  const app = h("select", { name: "virtual-app" });
  const environment = h("select", { name: "virtual-environment" }, options(["production", "sandbox"], "production"));
  const tokens = h("textarea", { name: "virtual-tokens", rows: "4", class: "mono", autocomplete: "off", placeholder: "64 hex digits a line" });
  const list = h("div", { id: "virtual-tokens" });
  const path = () => "/v1/apps/" + encodeURIComponent(app.value) + "/virtual-tokens";
  async function change(token, body, done) {
    try {
      await api("PATCH", path() + "/" + token, Object.assign({ environment: environment.value }, body));
      say(done);
      refresh();
    } catch (error) { failed(error); }
  }
  async function refresh() {
    if (!app.value) return;
    try {
      const answer = await api("GET", path() + "?environment=" + environment.value + "&limit=100");
      show(list, JSON.stringify([app.value, environment.value, answer]), () => answer.tokens.length ? h("div", {},
        h("p", { class: "hint" }, answer.total + " virtual token" + (answer.total === 1 ? "" : "s") + (answer.total > 100 ? " (the first 100 shown)" : "")),
        table(["token", "state", ""], answer.tokens.map((t) => h("tr", {},
          h("td", { class: "mono wrap" }, h("a", { href: "#lookup?token=" + t.token }, t.token)),
          h("td", {}, (t.online ? "online" : "offline") + (t.uninstalledAt ? ", uninstalled " + shortTime(t.uninstalledAt) : "")),
          h("td", { class: "actions" },
            h("button", { type: "button", class: "secondary", "aria-label": (t.online ? "Set offline " : "Set online ") + t.token,
              onclick: () => change(t.token, { online: !t.online }, t.token.slice(0, 16) + "… is " + (t.online ? "offline." : "online.")) }, t.online ? "Set offline" : "Set online"),
            h("button", { type: "button", class: "secondary", "aria-label": (t.uninstalledAt ? "Install " : "Uninstall ") + t.token,
              onclick: () => change(t.token, { uninstalledAt: t.uninstalledAt ? null : "now" }, t.token.slice(0, 16) + "… is " + (t.uninstalledAt ? "installed again." : "uninstalled.")) },
              t.uninstalledAt ? "Install" : "Uninstall"),
            h("button", { type: "button", class: "danger", "aria-label": "Remove " + t.token, onclick: async () => {
              try { await api("DELETE", path() + "/" + t.token + "?environment=" + environment.value); say("Removed " + t.token.slice(0, 16) + "…."); refresh(); } catch (error) { failed(error); }
            } }, "Remove")))))) : h("p", { class: "muted" }, "No virtual tokens of " + app.value + " in " + environment.value + "."));
    } catch (error) { failed(error); }
  }
  let listed = "";
  function fillApps(apps) {
    const now = JSON.stringify(apps);
    if (now === listed) return;
    listed = now;
    app.replaceChildren(...options(apps, app.value || apps[0]));
    refresh();
  }
  app.addEventListener("change", refresh);
  environment.addEventListener("change", refresh);
  const section = h("section", {}, h("h3", {}, "Virtual devices"),
    h("p", { class: "hint" }, "Your team's own Apple device tokens, registered to an app: pushes to them pass every check and are taken at once, held while offline, or refused Unregistered once uninstalled."),
    h("form", { class: "fields", id: "virtual-form", onsubmit: async (event) => {
      event.preventDefault();
      const given = tokens.value.split(/\s+/).filter(Boolean);
      try {
        const added = await api("POST", path(), { environment: environment.value, tokens: given });
        say("Registered " + added.added + " (" + added.existing + " registered already); " + added.total + " in all.");
        tokens.value = "";
        refresh();
      } catch (error) { failed(error); }
    } }, field("App", app), field("Environment", environment), field("Tokens", tokens, { class: "wide" }), h("div", {}, h("button", { type: "submit" }, "Register"))),
    list);
  return { section, fillApps, refresh };
}

// MARK: Start

document.getElementById("sign-out").addEventListener("click", async () => {
  try {
    await api("DELETE", "/console/session");
  } catch (error) {
    // 401: the session had ended already. Anything else: still signed in.
    if (error.status !== 401) { failed(new Error("Not signed out: " + error.message)); return; }
  }
  showSignIn("Signed out.");
});
window.addEventListener("hashchange", route);
api("GET", "/console/session").then(signedIn, () => showSignIn(""));
