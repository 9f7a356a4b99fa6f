// The live routing page: polls this hub's GET /debug/routing and draws
// it. Everything is built with DOM calls and textContent, never HTML
// strings, because every string on the page (model names, cluster ids,
// error messages) comes from the network. The page's Content-Security-
// Policy allows no inline style, so sizes go in SVG attributes and colours
// in CSS classes.
"use strict";

(() => {
  const ENDPOINT = "/debug/routing";
  const POLL_MS = 1000;
  const TIMEOUT_MS = 5000;
  const BACKOFF_MAX_MS = 10000;
  const TOKEN_KEY = "stargate.hub.admin-token";
  const PALETTE_SIZE = 12;
  // The SVG namespace is a name, not a location: nothing is fetched.
  const SVG_NS = "http://www.w3.org/2000/svg";
  const WINDOWS = [
    [60, "1 min"],
    [300, "5 min"],
    [900, "15 min"],
    [3600, "1 h"],
  ];
  const DEFAULT_WINDOW_S = 900;
  const DEFAULT_SESSIONS = 50;
  const HEALTH_ORDER = ["ok", "full", "refusing", "stale", "down"];
  const FLOW_ARROWS = { followed: "→", bounced: "↩", moved: "⇢" };

  // ---- small helpers; every reader of the view goes through them so a
  // missing or mistyped optional field draws as empty instead of throwing.

  const byId = (id) => document.getElementById(id);
  const arr = (x) => (Array.isArray(x) ? x : []);
  const obj = (x) => (x && typeof x === "object" && !Array.isArray(x) ? x : {});
  const str = (x) => (typeof x === "string" ? x : x == null ? "" : String(x));
  const num = (x) => (typeof x === "number" && Number.isFinite(x) ? x : 0);

  function el(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }

  function svg(tag, attrs, ...children) {
    return build(document.createElementNS(SVG_NS, tag), attrs, children);
  }

  function build(node, attrs, children) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      node.setAttribute(k, v === true ? "" : String(v));
    }
    append(node, children);
    return node;
  }

  // fill replaces node's children; like el, it flattens arrays, which
  // replaceChildren would turn into "[object …]" text.
  function fill(node, ...children) {
    node.replaceChildren();
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) append(node, c);
      else if (c instanceof Node) node.appendChild(c);
      else node.appendChild(document.createTextNode(String(c)));
    }
  }

  const intFmt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const oneFmt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  const compactFmt = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 });

  const fmtInt = (n) => intFmt.format(num(n));
  const fmtOne = (n) => oneFmt.format(num(n));
  const fmtCompact = (n) => compactFmt.format(num(n));
  const fmtPct = (part, whole) => (num(whole) > 0 ? oneFmt.format((100 * num(part)) / num(whole)) + " %" : "–");

  function fmtBytes(n) {
    let v = num(n);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let u = 0;
    while (v >= 1024 && u < units.length - 1) {
      v /= 1024;
      u++;
    }
    return (u === 0 ? intFmt.format(v) : oneFmt.format(v)) + " " + units[u];
  }

  function fmtMs(ms) {
    const v = num(ms);
    if (v >= 10000) return oneFmt.format(v / 1000) + " s";
    return intFmt.format(v) + " ms";
  }

  function fmtSeconds(s) {
    const v = Math.max(0, num(s));
    if (v < 10) return oneFmt.format(v) + " s";
    if (v < 120) return intFmt.format(v) + " s";
    if (v < 7200) return oneFmt.format(v / 60) + " min";
    return oneFmt.format(v / 3600) + " h";
  }

  // parseTime returns epoch milliseconds, or NaN for a missing time and
  // for Go's zero time, which the view sends for "never".
  function parseTime(s) {
    const t = Date.parse(str(s));
    return Number.isFinite(t) && t > 0 ? t : NaN;
  }

  const pad = (n, w) => String(n).padStart(w || 2, "0");

  function fmtClock(ms, millis) {
    if (!Number.isFinite(ms)) return "–";
    const d = new Date(ms);
    const hms = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    return millis ? hms + "." + pad(d.getMilliseconds(), 3) : hms;
  }

  // ago measures against the view's own generated_at, not this browser's
  // clock, so a skewed client clock does not distort it.
  function ago(ms) {
    const ref = parseTime(state.view && state.view.generated_at);
    if (!Number.isFinite(ms) || !Number.isFinite(ref)) return "";
    return fmtSeconds((ref - ms) / 1000) + " ago";
  }

  const shortId = (id) => (str(id).length > 10 ? str(id).slice(0, 8) + "…" : str(id));

  // ---- cluster colours. A cluster keeps its colour and letter for the
  // life of the page. The colour starts at a hash of its id so that it
  // does not depend on the order clusters appear in, and moves to the
  // next free colour on a collision while the palette has one: with four
  // clusters, a bare hash into twelve colours collides almost half the
  // time. The letter tells clusters apart when colours repeat or cannot
  // be seen.

  const clusterSlots = new Map();
  const clusterCodes = new Map();

  function fnv1a(s) {
    let h = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return h;
  }

  function letterCode(n) {
    let s = "";
    let i = n;
    do {
      s = String.fromCharCode(65 + (i % 26)) + s;
      i = Math.floor(i / 26) - 1;
    } while (i >= 0);
    return s;
  }

  function registerCluster(id) {
    if (!id || clusterSlots.has(id)) return;
    const used = new Set(clusterSlots.values());
    let slot = fnv1a(id) % PALETTE_SIZE;
    if (used.size < PALETTE_SIZE) {
      while (used.has(slot)) slot = (slot + 1) % PALETTE_SIZE;
    }
    clusterSlots.set(id, slot);
    clusterCodes.set(id, letterCode(clusterCodes.size));
  }

  // registerClusters walks the view in a fixed order (the clusters list is
  // sorted by region and id) so that a reload of the same data gives the
  // same letters.
  function registerClusters(view) {
    for (const c of arr(view.clusters)) registerCluster(str(c.cluster_id));
    for (const s of arr(obj(view.sessions).items)) {
      for (const id of arr(s.clusters)) registerCluster(str(id));
      for (const t of arr(s.turns)) {
        registerCluster(str(t.cluster_id));
        registerCluster(str(t.hint_cluster_id));
      }
    }
    for (const p of arr(obj(view.prefix).hottest)) {
      for (const c of arr(p.clusters)) registerCluster(str(c.cluster_id));
    }
  }

  function chip(id, extra) {
    if (!id) return el("span", { class: "chip chip-none", title: extra || "no cluster" }, "×");
    registerCluster(id);
    const title = extra ? id + " · " + extra : id;
    return el("span", { class: "chip pal-" + clusterSlots.get(id), title: title, "data-cluster": id }, clusterCodes.get(id));
  }

  function clusterLabel(id) {
    if (!id) return el("span", { class: "muted" }, "–");
    return el("span", { class: "cluster-label" }, chip(id), el("span", { class: "mono" }, id));
  }

  // ---- bars and small distributions

  // stackBar draws parts [{value, cls, label}] as one horizontal bar over
  // total (the parts' sum when absent). A viewBox of 0..100 lets the SVG
  // stretch to its cell without any CSS width.
  function stackBar(parts, total, cls) {
    const sum = parts.reduce((a, p) => a + Math.max(0, num(p.value)), 0);
    const whole = Math.max(num(total), sum);
    const bar = svg("svg", {
      class: "bar " + (cls || ""),
      viewBox: "0 0 100 10",
      preserveAspectRatio: "none",
      width: "100%",
      height: 10,
      role: "img",
      "aria-label": parts.map((p) => p.label + " " + fmtInt(p.value)).join(", "),
    });
    bar.appendChild(svg("rect", { class: "bar-bg", x: 0, y: 0, width: 100, height: 10 }));
    let x = 0;
    for (const p of parts) {
      const v = Math.max(0, num(p.value));
      if (!whole || !v) continue;
      const w = (100 * v) / whole;
      bar.appendChild(
        svg(
          "rect",
          { class: p.cls, x: x.toFixed(3), y: 0, width: w.toFixed(3), height: 10 },
          svg("title", null, p.label + ": " + fmtInt(v) + " (" + fmtPct(v, whole) + ")"),
        ),
      );
      x += w;
    }
    return bar;
  }

  // gauge is a used/capacity bar that turns amber and red as it fills.
  function gauge(used, capacity) {
    const u = num(used);
    const c = num(capacity);
    const ratio = c > 0 ? u / c : 0;
    const level = ratio >= 0.95 ? "level-high" : ratio >= 0.8 ? "level-mid" : "level-low";
    return stackBar([{ value: Math.min(u, c || u), cls: level, label: "used" }], c, "gauge");
  }

  // pills lists a count map: known keys in their order first, then any
  // other keys by name, so a new key from the hub still shows.
  function pills(map, order, prefix, label) {
    const m = obj(map);
    const keys = order.filter((k) => num(m[k]) > 0);
    for (const k of Object.keys(m).sort()) {
      if (!order.includes(k) && num(m[k]) > 0) keys.push(k);
    }
    if (!keys.length) return el("span", { class: "muted" }, "–");
    return el(
      "span",
      { class: "pills" },
      keys.map((k) =>
        el("span", { class: "pill " + prefix + "-" + k.replace(/[^a-z0-9_+-]/gi, ""), "data-key": k }, (label ? label(k) : k) + " ", el("b", null, fmtInt(m[k]))),
      ),
    );
  }

  function mapBar(map, order, prefix) {
    const m = obj(map);
    const keys = order.concat(Object.keys(m).filter((k) => !order.includes(k)).sort());
    const parts = keys.filter((k) => num(m[k]) > 0).map((k) => ({ value: m[k], cls: prefix + "-" + k.replace(/[^a-z0-9_+-]/gi, ""), label: k }));
    return stackBar(parts, 0, "mini");
  }

  // ---- state

  const state = {
    view: null,
    receivedAt: 0,
    failures: 0,
    timer: 0,
    controller: null,
    generation: 0,
    paused: false,
    token: "",
    filters: { model: "", region: "", window: DEFAULT_WINDOW_S, sessions: DEFAULT_SESSIONS, turns: 0, flow: "" },
    selected: "",
    selectedLast: null,
    lastError: "",
    state: "loading",
  };

  // ---- the admin token

  function loadToken() {
    const m = /^#token=(.*)$/.exec(location.hash);
    if (m) {
      let t = m[1];
      try {
        t = decodeURIComponent(t);
      } catch (e) {
        // A malformed escape is taken as typed.
      }
      saveToken(t);
      // The token must not stay in the address bar, the history or a
      // copied link.
      history.replaceState(history.state, "", location.pathname + location.search);
      return;
    }
    try {
      state.token = sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (e) {
      state.token = "";
    }
  }

  function saveToken(t) {
    state.token = t.trim();
    try {
      if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
      else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) {
      // Storage can be disabled; the token then lasts until reload.
    }
    showTokenState();
  }

  function showTokenState() {
    const input = byId("token");
    input.value = "";
    input.placeholder = state.token ? "set (hidden); empty + apply clears" : "not set";
  }

  // ---- filters: the controls, mirrored in the address bar so a reload or
  // a shared link keeps them.

  function readFiltersFromURL() {
    const q = new URLSearchParams(location.search);
    const f = state.filters;
    f.model = q.get("model") || "";
    f.region = q.get("region") || "";
    f.window = positive(q.get("window_s"), DEFAULT_WINDOW_S);
    f.sessions = positive(q.get("sessions"), DEFAULT_SESSIONS);
    f.turns = positive(q.get("turns"), 0);
    const flow = q.get("flow") || "";
    f.flow = flow === "escape" || flow === "bounced" ? flow : "";
    state.selected = q.get("session") || "";
  }

  function positive(s, dflt) {
    const n = parseInt(str(s), 10);
    return Number.isFinite(n) && n > 0 ? n : dflt;
  }

  function writeFiltersToURL() {
    const f = state.filters;
    const q = new URLSearchParams();
    if (f.model) q.set("model", f.model);
    if (f.region) q.set("region", f.region);
    if (f.window !== DEFAULT_WINDOW_S) q.set("window_s", f.window);
    if (f.sessions !== DEFAULT_SESSIONS) q.set("sessions", f.sessions);
    if (f.turns) q.set("turns", f.turns);
    if (f.flow) q.set("flow", f.flow);
    if (state.selected) q.set("session", state.selected);
    const search = q.toString();
    history.replaceState(history.state, "", location.pathname + (search ? "?" + search : ""));
  }

  function requestURL() {
    const f = state.filters;
    const q = new URLSearchParams();
    if (f.model) q.set("model", f.model);
    if (f.region) q.set("region", f.region);
    q.set("window_s", f.window);
    q.set("sessions", f.sessions);
    if (f.turns) q.set("turns", f.turns);
    if (f.flow) q.set("flow", f.flow);
    return ENDPOINT + "?" + q.toString();
  }

  function bindControls() {
    byId("f-model").addEventListener("change", (e) => {
      state.filters.model = e.target.value;
      filtersChanged(true);
    });
    byId("f-region").addEventListener("change", (e) => {
      state.filters.region = e.target.value;
      filtersChanged(true);
    });
    byId("f-window").addEventListener("change", (e) => {
      state.filters.window = positive(e.target.value, DEFAULT_WINDOW_S);
      filtersChanged(true);
    });
    byId("f-sessions").addEventListener("change", (e) => {
      const max = positive(e.target.max, Infinity);
      state.filters.sessions = Math.min(positive(e.target.value, DEFAULT_SESSIONS), max);
      e.target.value = state.filters.sessions;
      filtersChanged(true);
    });
    byId("f-flow").addEventListener("change", (e) => {
      state.filters.flow = e.target.value;
      // The hub applies the flow filter before the session limit, so a
      // short list still shows the matching sessions; the page filters
      // what it has at once and fetches the rest.
      filtersChanged(true);
    });
    byId("controls").addEventListener("submit", (e) => e.preventDefault());
    byId("auth-form").addEventListener("submit", (e) => {
      e.preventDefault();
      saveToken(byId("token").value);
      refetchNow();
    });
    byId("pause").addEventListener("click", togglePause);
    byId("detail-close").addEventListener("click", () => selectSession(""));
    const body = byId("sessions-body");
    body.addEventListener("click", (e) => {
      const row = e.target.closest("tr[data-session-id]");
      if (row) selectSession(row.getAttribute("data-session-id") === state.selected ? "" : row.getAttribute("data-session-id"));
    });
    body.addEventListener("keydown", (e) => {
      if (e.key !== "Enter" && e.key !== " ") return;
      const row = e.target.closest("tr[data-session-id]");
      if (!row) return;
      e.preventDefault();
      selectSession(row.getAttribute("data-session-id"));
    });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && state.selected) selectSession("");
    });
  }

  function filtersChanged(refetch) {
    writeFiltersToURL();
    if (refetch) refetchNow();
    else if (state.view) renderSessions(state.view);
  }

  function selectSession(id) {
    state.selected = id;
    if (!id) state.selectedLast = null;
    writeFiltersToURL();
    if (state.view) renderSessions(state.view);
    if (id) byId("session-detail").scrollIntoView({ block: "nearest" });
  }

  // syncControls shows the query the view was built with (after the
  // hub's defaults and clamps) and the options it offers. A control the
  // user is editing is left alone.
  function syncControls(view) {
    const q = obj(view.query);
    const o = obj(view.options);
    const f = state.filters;
    if (typeof q.model === "string") f.model = q.model;
    if (typeof q.region === "string") f.region = q.region;
    if (num(q.window_s) > 0) f.window = num(q.window_s);
    if (num(q.sessions) > 0) f.sessions = num(q.sessions);

    fillSelect(byId("f-model"), "all models", arr(o.models).map(str), f.model);
    fillSelect(byId("f-region"), "all regions", arr(o.regions).map(str), f.region);
    fillWindows(num(o.max_window_s), f.window);

    const sessions = byId("f-sessions");
    if (num(o.max_sessions) > 0) sessions.max = num(o.max_sessions);
    if (document.activeElement !== sessions) sessions.value = f.sessions;
    byId("f-flow").value = f.flow;
  }

  function fillSelect(select, allLabel, values, current) {
    const list = values.slice();
    if (current && !list.includes(current)) list.push(current);
    const key = list.join("\n");
    // Rebuilding an unchanged list every second would close it under the
    // user's pointer.
    if (select.getAttribute("data-options") !== key) {
      fill(select, el("option", { value: "" }, allLabel), list.map((v) => el("option", { value: v }, v)));
      select.setAttribute("data-options", key);
    }
    if (document.activeElement !== select) select.value = current;
  }

  function fillWindows(max, current) {
    const opts = WINDOWS.filter(([s]) => !max || s <= max);
    if (max && !opts.some(([s]) => s === max) && max < WINDOWS[WINDOWS.length - 1][0]) opts.push([max, fmtSeconds(max)]);
    if (current && !opts.some(([s]) => s === current)) opts.push([current, fmtSeconds(current)]);
    opts.sort((a, b) => a[0] - b[0]);
    fillSelectPairs(byId("f-window"), opts, current);
  }

  function fillSelectPairs(select, pairs, current) {
    const key = pairs.map((p) => p.join("=")).join("\n");
    if (select.getAttribute("data-options") !== key) {
      fill(select, pairs.map(([v, label]) => el("option", { value: v }, label)));
      select.setAttribute("data-options", key);
    }
    if (document.activeElement !== select) select.value = String(current);
  }

  // ---- polling. One request at a time: the next is scheduled only when
  // the previous one has finished, so a slow hub is never asked twice.
  // A control change aborts the request in flight and asks at once; the
  // generation counter makes the aborted request's ending a no-op.

  function schedule(delay) {
    clearTimeout(state.timer);
    state.timer = 0;
    if (document.hidden || state.paused) return;
    state.timer = setTimeout(poll, delay);
  }

  function refetchNow() {
    if (state.controller) state.controller.abort();
    state.controller = null;
    clearTimeout(state.timer);
    state.timer = 0;
    if (!state.paused) poll();
  }

  function backoffDelay() {
    return Math.min(POLL_MS * 2 ** Math.max(0, state.failures - 1), BACKOFF_MAX_MS);
  }

  async function poll() {
    state.timer = 0;
    const generation = ++state.generation;
    const controller = new AbortController();
    state.controller = controller;
    let timedOut = false;
    const timeout = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, TIMEOUT_MS);
    let ok = false;
    try {
      const headers = { Accept: "application/json" };
      if (state.token) headers.Authorization = "Bearer " + state.token;
      const res = await fetch(requestURL(), { headers: headers, signal: controller.signal, cache: "no-store", credentials: "same-origin" });
      if (res.status === 401 || res.status === 403) throw new AuthError(res.status, await errorMessage(res));
      if (!res.ok) throw new Error("HTTP " + res.status + ": " + (await errorMessage(res)));
      const view = await res.json();
      if (generation !== state.generation) return;
      state.failures = 0;
      ok = true;
      onView(view);
    } catch (err) {
      if (generation !== state.generation) return;
      state.failures++;
      onError(timedOut ? new Error("no answer within " + TIMEOUT_MS / 1000 + " s") : err);
    } finally {
      clearTimeout(timeout);
      if (generation === state.generation) {
        state.controller = null;
        schedule(ok ? POLL_MS : backoffDelay());
      }
    }
  }

  class AuthError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // errorMessage reads the hub's OpenAI-shaped error body, falling back to
  // the status text for anything else (a proxy's HTML page, say).
  async function errorMessage(res) {
    try {
      const body = await res.json();
      const m = str(obj(obj(body).error).message);
      if (m) return m;
    } catch (e) {
      // Not JSON.
    }
    return res.statusText || "request failed";
  }

  function onVisibility() {
    if (document.hidden) {
      // A request in flight finishes and draws; it schedules nothing.
      clearTimeout(state.timer);
      state.timer = 0;
    } else if (!state.controller && !state.paused) {
      poll();
    }
  }

  function togglePause() {
    state.paused = !state.paused;
    const b = byId("pause");
    b.setAttribute("aria-pressed", String(state.paused));
    b.textContent = state.paused ? "resume" : "pause";
    if (state.paused) {
      clearTimeout(state.timer);
      state.timer = 0;
    } else if (!state.controller) {
      poll();
    }
    showStatus();
  }

  function onView(view) {
    state.view = obj(view);
    state.receivedAt = Date.now();
    state.lastError = "";
    state.state = "live";
    render(state.view);
    showStatus();
  }

  function onError(err) {
    const retry = fmtSeconds(backoffDelay() / 1000);
    if (err instanceof AuthError) {
      state.state = "auth";
      state.lastError =
        "This hub asks for its admin token (HTTP " + err.status + ": " + err.message + "). Enter it in the admin token field and apply; retrying in " + retry + ".";
    } else {
      state.state = "error";
      state.lastError = "Could not load " + ENDPOINT + ": " + str(err && err.message) + ". Retrying in " + retry + ".";
    }
    showStatus();
  }

  function showStatus() {
    const s = byId("status");
    s.setAttribute("data-state", state.state);
    s.setAttribute("data-paused", String(state.paused));
    const labels = { loading: "loading…", live: "live", error: "error", auth: "admin token required" };
    s.textContent = state.paused ? "paused" : labels[state.state] || state.state;
    const msg = byId("message");
    msg.textContent = state.lastError;
    msg.hidden = !state.lastError;
    msg.setAttribute("data-state", state.state);
    document.body.setAttribute("data-stale", String(state.state !== "live" && !!state.view));
    showAge();
  }

  function showAge() {
    const age = byId("age");
    if (!state.receivedAt) {
      age.textContent = "";
      return;
    }
    const gen = parseTime(state.view && state.view.generated_at);
    age.textContent =
      "data " + fmtSeconds((Date.now() - state.receivedAt) / 1000) + " old" + (Number.isFinite(gen) ? " · built " + fmtClock(gen) : "");
  }

  // ---- rendering. Each panel draws on its own, so a fault in one leaves
  // the others live and says where it is.

  function render(view) {
    registerClusters(view);
    syncControls(view);
    const panels = [
      ["top", renderHeader],
      ["clusters", renderClusters],
      ["decisions", renderDecisions],
      ["decisions", renderTimeline],
      ["sessions", renderSessions],
      ["prefix", renderPrefix],
    ];
    for (const [id, fn] of panels) {
      try {
        fn(view);
        clearPanelError(id);
      } catch (err) {
        console.error("routing page: drawing " + id + " failed", err);
        showPanelError(id, err);
      }
    }
  }

  function panelOf(id) {
    return id === "top" ? document.querySelector("header.top") : byId(id);
  }

  function showPanelError(id, err) {
    const panel = panelOf(id);
    let p = panel.querySelector(":scope > .panel-error");
    if (!p) {
      p = el("p", { class: "panel-error" });
      panel.appendChild(p);
    }
    p.textContent = "This panel could not be drawn: " + str(err && err.message);
  }

  function clearPanelError(id) {
    const p = panelOf(id).querySelector(":scope > .panel-error");
    if (p) p.remove();
  }

  function renderHeader(view) {
    byId("hub-id").textContent = str(view.hub_id) || "(no hub id)";
    if (str(view.scope)) byId("scope").textContent = str(view.scope);
    const r = obj(view.records);
    fill(byId("coverage"),
      "records: ring of ",
      el("b", null, fmtInt(r.capacity)),
      " (" + fmtBytes(r.bytes) + ") · ",
      el("b", null, fmtInt(r.in_window)),
      " in the " + fmtSeconds(num(obj(view.query).window_s)) + " window · ",
      fmtInt(r.total) + " since start · ",
      el("span", { class: num(r.dropped) > 0 ? "warn-text" : "" }, fmtInt(r.dropped) + " dropped"),
    );
    const warn = byId("coverage-warning");
    if (r.window_covered === false) {
      const oldest = parseTime(r.oldest_at);
      const gen = parseTime(view.generated_at);
      const held = Number.isFinite(oldest) && Number.isFinite(gen) ? fmtSeconds((gen - oldest) / 1000) : "part";
      warn.textContent =
        "The ring holds only the last " + held + " of the " + fmtSeconds(num(obj(view.query).window_s)) +
        " window: older records were overwritten, so counts below cover less than the window (a larger --routing-page-records keeps more).";
      warn.hidden = false;
    } else {
      warn.hidden = true;
    }
  }

  function worstHealth(list) {
    let worst = -1;
    for (const c of list) worst = Math.max(worst, HEALTH_ORDER.indexOf(str(c.health)));
    return worst < 0 ? "unknown" : HEALTH_ORDER[worst];
  }

  function renderClusters(view) {
    const root = byId("cluster-groups");
    const list = arr(view.clusters);
    if (!list.length) {
      fill(root, el("p", { class: "empty" }, "No clusters match this filter: no pylon has registered a model it selects."));
      return;
    }
    // Regions in the order the view sorts them; inside a region one card
    // per cluster id, with one block per target (model, routing key).
    const regions = new Map();
    for (const c of list) {
      const region = str(c.region) || "(no region)";
      if (!regions.has(region)) regions.set(region, { source: str(c.region_source), clusters: new Map() });
      const g = regions.get(region);
      const id = str(c.cluster_id);
      if (!g.clusters.has(id)) g.clusters.set(id, []);
      g.clusters.get(id).push(c);
    }
    const groups = [];
    for (const [region, g] of regions) {
      const cards = [];
      for (const [id, targets] of g.clusters) cards.push(clusterCard(id, targets));
      groups.push(
        el(
          "div",
          { class: "region", "data-region": region },
          el(
            "h3",
            null,
            region,
            g.source === "rtt" ? el("span", { class: "muted", title: "no pylon registered a region: grouped by round-trip time" }, " grouped by RTT") : null,
            el("span", { class: "muted" }, " · " + g.clusters.size + (g.clusters.size === 1 ? " cluster" : " clusters")),
          ),
          el("div", { class: "cards" }, cards),
        ),
      );
    }
    fill(root, ...groups);
  }

  function clusterCard(id, targets) {
    const health = worstHealth(targets);
    // The hub counts served and escapes in per cluster and repeats them on
    // each of its targets: summing them would count a request once per
    // model the cluster serves.
    const served = Math.max(...targets.map((t) => num(t.served)));
    const escapesIn = Math.max(...targets.map((t) => num(t.escapes_in)));
    return el(
      "article",
      { class: "card", "data-cluster-id": id, "data-health": health },
      el(
        "header",
        null,
        chip(id),
        el("span", { class: "card-title mono" }, id),
        el("span", { class: "health", "data-health": health }, health),
      ),
      el(
        "p",
        { class: "card-sum" },
        "served ",
        el("b", null, fmtInt(served)),
        " · escapes in ",
        el("b", null, fmtInt(escapesIn)),
        " · RTT ",
        el("b", null, fmtOne(Math.max(...targets.map((t) => num(t.rtt_ms)))) + " ms"),
      ),
      targets.map(targetBlock),
    );
  }

  function targetBlock(t) {
    const health = str(t.health) || "unknown";
    const cap = num(t.capacity);
    const kvCap = num(t.kv_capacity_tokens);
    return el(
      "div",
      { class: "target", "data-model": str(t.model), "data-routing-key": str(t.routing_key), "data-health": health },
      el(
        "div",
        { class: "target-head" },
        el("span", { class: "model", title: str(t.model) }, str(t.model)),
        str(t.routing_key) ? el("span", { class: "muted" }, " · " + str(t.routing_key)) : null,
        el("span", { class: "health small", "data-health": health }, health),
      ),
      el(
        "div",
        { class: "meter" },
        el("span", { class: "meter-label" }, "active"),
        cap > 0 ? gauge(t.active, cap) : el("span", { class: "muted" }, "capacity not reported"),
        el("span", { class: "meter-value" }, fmtInt(t.active) + " / " + (cap > 0 ? fmtInt(cap) : "?")),
      ),
      el(
        "div",
        { class: "meter" },
        el("span", { class: "meter-label" }, "KV"),
        kvCap > 0 ? gauge(t.kv_used_tokens, kvCap) : el("span", { class: "muted" }, "not reported"),
        el(
          "span",
          { class: "meter-value", title: kvCap > 0 ? fmtInt(t.kv_used_tokens) + " of " + fmtInt(kvCap) + " tokens (" + fmtPct(t.kv_used_tokens, kvCap) + ")" : null },
          kvCap > 0 ? fmtCompact(t.kv_used_tokens) + " / " + fmtCompact(kvCap) : "",
        ),
      ),
      el(
        "dl",
        { class: "facts" },
        fact("queued input", fmtCompact(t.queued_input_tokens) + " tok"),
        fact("input TPS", fmtCompact(t.input_tps)),
        fact("reserved", fmtInt(t.reservations) + " req · " + fmtCompact(t.reserved_tokens) + " tok"),
        fact("backends", fmtInt(t.backends)),
      ),
    );
  }

  function fact(label, value) {
    return el("div", null, el("dt", null, label), el("dd", null, value));
  }

  const CLASS_ORDER = ["new", "returning", "stale", "unclassified"];
  const STATUS_ORDER = ["2xx", "4xx", "499", "5xx"];
  const RANK_ORDER = ["1", "2", "3", "4+"];
  const TIER_ORDER = ["cache", "split", "overflow", "load"];
  const ESCAPE_ORDER = ["new_not_waiting", "group_saturated", "cluster_lost", "retry"];

  function renderDecisions(view) {
    const body = byId("decisions-body");
    const list = arr(view.decisions);
    if (!list.length) {
      fill(body, el("tr", null, el("td", { colspan: 10, class: "empty" }, "No requests in the window.")));
      return;
    }
    fill(body,
      ...list.map((d) => {
        const requests = num(d.requests);
        return el(
          "tr",
          { "data-model": str(d.model), "data-routing-key": str(d.routing_key), "data-algorithm": str(d.algorithm) },
          el(
            "td",
            null,
            el("div", { class: "model" }, str(d.model)),
            el("div", { class: "muted" }, (str(d.routing_key) || "(no routing key)") + " · ", el("span", { class: "algo" }, str(d.algorithm))),
          ),
          el("td", { class: "num" }, fmtInt(requests)),
          el(
            "td",
            { class: "wide" },
            stackBar(
              [
                { value: d.primary, cls: "sel-primary", label: "primary" },
                { value: d.fallback, cls: "sel-fallback", label: "fallback" },
                { value: d.unplaced, cls: "sel-unplaced", label: "unplaced" },
              ],
              requests,
            ),
            el(
              "div",
              { class: "bar-text" },
              "primary " + fmtPct(d.primary, requests) + " · fallback " + fmtPct(d.fallback, requests) + " · unplaced " + fmtPct(d.unplaced, requests),
            ),
          ),
          el("td", null, pills(d.rank_depth, RANK_ORDER, "rank", (k) => "#" + k)),
          el("td", { class: "num" }, fmtInt(d.waited) + " / " + fmtInt(d.waits)),
          el("td", { class: "num" }, fmtInt(d.retried) + " / " + fmtInt(d.retries)),
          el("td", null, mapBar(d.session_classes, CLASS_ORDER, "class"), pills(d.session_classes, CLASS_ORDER, "class")),
          el("td", null, pills(d.escapes, ESCAPE_ORDER, "escape")),
          el("td", null, pills(d.status, STATUS_ORDER, "status")),
          el("td", null, pills(d.prefix_tiers, TIER_ORDER, "tier")),
        );
      }),
    );
  }

  // niceStep picks a 1-2-5 step that puts about four ticks under max.
  function niceStep(max) {
    const raw = Math.max(1, max) / 4;
    const p = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return Math.max(1, m * p);
    return 10 * p;
  }

  // chartWidth is the width of the chart's wrapper, a div without
  // padding, so the SVG's pixel width matches the room it has and its text
  // is drawn at its real size.
  function chartWidth(svgNode) {
    const w = svgNode.parentNode ? svgNode.parentNode.clientWidth : 0;
    return Math.max(320, Math.floor(w || 960));
  }

  function renderTimeline(view) {
    const chart = byId("timeline-chart");
    const tl = obj(view.timeline);
    const buckets = arr(tl.buckets);
    const W = chartWidth(chart);
    const H = 220;
    const m = { left: 48, right: 12, top: 34, bottom: 26 };
    chart.setAttribute("width", W);
    chart.setAttribute("height", H);
    chart.setAttribute("viewBox", "0 0 " + W + " " + H);
    if (!buckets.length) {
      byId("timeline-bucket").textContent = "";
      fill(chart, svg("text", { x: W / 2, y: H / 2, class: "axis-note", "text-anchor": "middle" }, "No buckets: no requests in the window."));
      return;
    }
    const bucketS = num(tl.bucket_s);
    const plotW = W - m.left - m.right;
    const plotH = H - m.top - m.bottom;
    const max = Math.max(1, ...buckets.map((b) => Math.max(num(b.requests), num(b.primary) + num(b.fallback))));
    const step = niceStep(max);
    const top = Math.ceil(max / step) * step;
    const y = (v) => m.top + plotH - (plotH * v) / top;
    const bw = plotW / buckets.length;
    const gap = bw > 6 ? 1 : 0;
    const nodes = [];

    for (let v = 0; v <= top; v += step) {
      nodes.push(svg("line", { class: "gridline", x1: m.left, x2: W - m.right, y1: y(v), y2: y(v) }));
      nodes.push(svg("text", { class: "axis", x: m.left - 6, y: y(v) + 4, "text-anchor": "end" }, fmtCompact(v)));
    }
    nodes.push(svg("text", { class: "axis", x: 4, y: 12 }, "escapes"));
    nodes.push(svg("text", { class: "axis", x: 4, y: 26 }, "errors"));

    const maxEsc = Math.max(1, ...buckets.map((b) => num(b.escapes)));
    const maxErr = Math.max(1, ...buckets.map((b) => num(b.errors)));
    buckets.forEach((b, i) => {
      const x = m.left + i * bw;
      const primary = num(b.primary);
      const fallback = num(b.fallback);
      const unplaced = Math.max(0, num(b.requests) - primary - fallback);
      const at = parseTime(b.at);
      const g = svg("g", { class: "bucket", "data-bucket": i }, svg("title", null, bucketTitle(b, at, bucketS, unplaced)));
      // A full-height transparent rect makes the whole column hoverable.
      g.appendChild(svg("rect", { class: "hover", x: x, y: m.top, width: bw, height: plotH }));
      let base = 0;
      for (const [v, cls] of [
        [primary, "sel-primary"],
        [fallback, "sel-fallback"],
        [unplaced, "sel-unplaced"],
      ]) {
        if (v <= 0) continue;
        g.appendChild(svg("rect", { class: cls, x: x + gap / 2, y: y(base + v), width: Math.max(0.5, bw - gap), height: y(base) - y(base + v) }));
        base += v;
      }
      if (num(b.escapes) > 0) g.appendChild(svg("circle", { class: "mark-escape", cx: x + bw / 2, cy: 8, r: markRadius(b.escapes, maxEsc, bw) }));
      if (num(b.errors) > 0) g.appendChild(svg("circle", { class: "mark-error", cx: x + bw / 2, cy: 22, r: markRadius(b.errors, maxErr, bw) }));
      nodes.push(g);
    });

    nodes.push(svg("line", { class: "axis-line", x1: m.left, x2: W - m.right, y1: y(0), y2: y(0) }));
    const labels = Math.max(2, Math.floor(plotW / 90));
    const every = Math.max(1, Math.ceil(buckets.length / labels));
    const withSeconds = bucketS > 0 && bucketS < 60;
    for (let i = 0; i < buckets.length; i += every) {
      const x = m.left + i * bw;
      nodes.push(svg("line", { class: "tick", x1: x, x2: x, y1: y(0), y2: y(0) + 4 }));
      nodes.push(svg("text", { class: "axis", x: x, y: H - 8, "text-anchor": i === 0 ? "start" : x + 30 > W ? "end" : "middle" }, fmtClockShort(parseTime(buckets[i].at), withSeconds)));
    }
    fill(chart, ...nodes);
    byId("timeline-bucket").textContent = bucketS > 0 ? "one bar per " + fmtSeconds(bucketS) : "";
  }

  function markRadius(v, max, bw) {
    return Math.min(Math.max(1.5, bw / 2), 1.5 + 4.5 * Math.sqrt(num(v) / max));
  }

  function fmtClockShort(ms, seconds) {
    if (!Number.isFinite(ms)) return "";
    const s = fmtClock(ms);
    return seconds ? s : s.slice(0, 5);
  }

  function bucketTitle(b, at, bucketS, unplaced) {
    return [
      fmtClock(at) + (bucketS ? " + " + fmtSeconds(bucketS) : ""),
      fmtInt(b.requests) + " requests: " + fmtInt(b.primary) + " primary, " + fmtInt(b.fallback) + " fallback, " + fmtInt(unplaced) + " unplaced",
      fmtInt(b.waited) + " waited · " + fmtInt(b.escapes) + " escapes · " + fmtInt(b.errors) + " errors",
      "sessions: " + fmtInt(b.new) + " new, " + fmtInt(b.returning) + " returning, " + fmtInt(b.stale) + " stale",
    ].join("\n");
  }

  // ---- sessions

  function sessionFlows(s) {
    const seen = [];
    for (const t of arr(s.turns)) {
      const f = str(t.flow);
      if (f && !seen.includes(f)) seen.push(f);
    }
    return seen;
  }

  function sessionMatches(s, flows) {
    const f = state.filters.flow;
    if (f === "escape") return num(s.escapes) > 0 || flows.includes("escape");
    if (f === "bounced") return num(s.bounced) > 0 || flows.includes("bounced");
    return true;
  }

  function turnMark(t, index) {
    const flow = str(t.flow);
    const title = [
      "turn " + (index + 1) + " · " + (flow || "?"),
      fmtClock(parseTime(t.at), true),
      str(t.cluster_id) || "no cluster",
      str(t.escape) ? "escape: " + str(t.escape) : "",
      "status " + fmtInt(t.status),
    ]
      .filter(Boolean)
      .join(" · ");
    return el(
      "span",
      { class: "turn", "data-flow": flow, title: title },
      FLOW_ARROWS[flow] ? el("span", { class: "arrow" }, FLOW_ARROWS[flow]) : null,
      str(t.cluster_id) ? chip(str(t.cluster_id), title) : chip("", title),
    );
  }

  function renderSessions(view) {
    const sessions = obj(view.sessions);
    const items = arr(sessions.items);
    const rows = [];
    let shown = 0;
    for (const s of items) {
      const flows = sessionFlows(s);
      if (!sessionMatches(s, flows)) continue;
      shown++;
      const id = str(s.id);
      const turns = arr(s.turns);
      const lastAt = parseTime(s.last_at);
      rows.push(
        el(
          "tr",
          {
            "data-session-id": id,
            "data-flows": flows.join(" "),
            class: id === state.selected ? "selected" : null,
            tabindex: 0,
            "aria-selected": String(id === state.selected),
          },
          el("td", { class: "mono", title: id }, shortId(id)),
          el("td", null, str(s.model)),
          el("td", { title: fmtClock(lastAt, true) }, ago(lastAt)),
          el("td", { class: "num", title: s.turns_truncated ? "only the newest " + turns.length + " are listed" : null }, fmtInt(s.turns_total) + (s.turns_truncated ? "*" : "")),
          el("td", { class: "wide" }, el("span", { class: "turns-strip" }, s.turns_truncated ? el("span", { class: "muted more" }, "…") : null, turns.map(turnMark))),
          el("td", { class: "num" + (num(s.escapes) ? " hl-escape" : "") }, fmtInt(s.escapes)),
          el("td", { class: "num" }, fmtInt(s.followed)),
          el("td", { class: "num" + (num(s.bounced) ? " hl-bounced" : "") }, fmtInt(s.bounced)),
        ),
      );
    }
    const body = byId("sessions-body");
    const focused = document.activeElement && body.contains(document.activeElement) ? document.activeElement.getAttribute("data-session-id") : null;
    if (!rows.length) {
      const why = items.length ? "No listed session matches the flow filter." : "No sessions in the window.";
      fill(body, el("tr", null, el("td", { colspan: 8, class: "empty" }, why)));
    } else {
      fill(body, ...rows);
      // The rows are new elements each poll; keyboard focus follows the
      // session, not the element.
      if (focused) {
        const again = rows.find((r) => r.getAttribute("data-session-id") === focused);
        if (again) again.focus({ preventScroll: true });
      }
    }
    renderSessionCount(view, sessions, items.length, shown);
    renderClusterKey(view);
    renderDetail(view, items);
  }

  function renderSessionCount(view, sessions, listed, shown) {
    const limit = num(obj(view.query).sessions);
    const parts = [el("b", null, fmtInt(shown)), " of ", el("b", null, fmtInt(sessions.total)), " sessions shown (limit " + fmtInt(limit) + ")"];
    if (sessions.truncated) parts.push(el("span", { class: "warn-text" }, " · the list is cut at the limit: raise it to see older sessions"));
    if (state.filters.flow) parts.push(" · the flow filter hides " + fmtInt(listed - shown) + " of the " + fmtInt(listed) + " listed");
    const turns = num(obj(view.query).turns);
    if (turns) parts.push(" · at most " + fmtInt(turns) + " turns per session (* marks a session with more)");
    fill(byId("sessions-count"), ...parts);
  }

  // renderClusterKey maps each chip letter and colour to its cluster id.
  function renderClusterKey(view) {
    const ids = [];
    const add = (id) => {
      if (id && !ids.includes(id)) ids.push(id);
    };
    for (const c of arr(view.clusters)) add(str(c.cluster_id));
    for (const s of arr(obj(view.sessions).items)) for (const id of arr(s.clusters)) add(str(id));
    const key = byId("cluster-key");
    if (!ids.length) {
      fill(key);
      return;
    }
    fill(key, el("span", { class: "legend-title" }, "clusters"), ids.map((id) => el("span", { class: "key" }, chip(id), el("span", { class: "mono" }, id))));
  }

  function renderDetail(view, items) {
    const panel = byId("session-detail");
    if (!state.selected) {
      panel.hidden = true;
      document.querySelector(".sessions-layout").setAttribute("data-detail", "closed");
      return;
    }
    panel.hidden = false;
    document.querySelector(".sessions-layout").setAttribute("data-detail", "open");
    const found = items.find((s) => str(s.id) === state.selected);
    const gone = byId("detail-gone");
    if (found) {
      state.selectedLast = found;
      gone.hidden = true;
    } else {
      gone.textContent = state.selectedLast
        ? "This session is no longer in the list (its last turn left the window, or newer sessions pushed it past the limit); its turns as last seen:"
        : "Session " + state.selected + " is not in the list: its last turn left the window, it is past the session limit, or the filter excludes its model.";
      gone.hidden = false;
    }
    panel.setAttribute("data-session-id", state.selected);
    panel.setAttribute("data-present", String(!!found));
    const s = found || state.selectedLast;
    fill(byId("detail-title"), "session ", el("span", { class: "mono" }, state.selected));
    if (!s) {
      fill(byId("detail-meta"));
      fill(byId("detail-chart"));
      fill(byId("detail-turns"));
      return;
    }
    const turns = arr(s.turns);
    fill(byId("detail-meta"),
      el("span", { class: "model" }, str(s.model)),
      " · " + fmtInt(s.turns_total) + " turns in the window",
      s.turns_truncated ? " (the newest " + fmtInt(turns.length) + " listed)" : "",
      " · " + fmtInt(s.escapes) + " escapes, " + fmtInt(s.followed) + " followed, " + fmtInt(s.bounced) + " bounced · clusters: ",
      arr(s.clusters).map((id) => clusterLabel(str(id))),
    );
    drawSessionChart(byId("detail-chart"), turns);
    const first = Math.max(0, num(s.turns_total) - turns.length);
    fill(byId("detail-turns"),
      ...turns.map((t, i) =>
        el(
          "tr",
          { "data-turn": i, "data-flow": str(t.flow) },
          el("td", { class: "num" }, String(first + i + 1)),
          el("td", { class: "mono" }, fmtClock(parseTime(t.at), true)),
          el("td", null, el("span", { class: "flow-badge", "data-flow": str(t.flow) }, (FLOW_ARROWS[str(t.flow)] || "") + " " + (str(t.flow) || "?"))),
          el("td", null, clusterLabel(str(t.cluster_id))),
          el("td", null, str(t.hint_cluster_id) ? chip(str(t.hint_cluster_id), "the gateway's last-cluster hint") : el("span", { class: "muted" }, "–")),
          el("td", null, str(t.class) || "–"),
          el("td", null, (str(t.selection) || "not placed") + (num(t.rank_depth) ? " · #" + fmtInt(t.rank_depth) : "")),
          el("td", { class: "num" }, fmtInt(t.waits) + " · " + fmtInt(t.retries)),
          el("td", { class: str(t.escape) ? "hl-escape" : "muted" }, str(t.escape) || "–"),
          el("td", { class: "num status-" + statusClass(t.status) }, num(t.status) ? String(num(t.status)) : "–"),
          el("td", { class: "num" }, fmtMs(t.duration_ms)),
        ),
      ),
    );
  }

  function statusClass(code) {
    const c = num(code);
    if (c === 499) return "499";
    if (c >= 200 && c < 600) return Math.floor(c / 100) + "xx";
    return "none";
  }

  // drawSessionChart puts each turn on its cluster's lane over time and
  // joins consecutive turns, so a session's path through clusters reads at
  // a glance: a flat line stays, a step is a move.
  function drawSessionChart(node, turns) {
    const lanes = [];
    for (const t of turns) {
      const id = str(t.cluster_id);
      if (!lanes.includes(id)) lanes.push(id);
    }
    lanes.sort((a, b) => (a === "") - (b === "") || (clusterCodes.get(a) || "").localeCompare(clusterCodes.get(b) || ""));
    const W = chartWidth(node);
    const laneH = 18;
    const m = { left: 110, right: 14, top: 10, bottom: 8 };
    const H = m.top + m.bottom + Math.max(1, lanes.length) * laneH;
    node.setAttribute("width", W);
    node.setAttribute("height", H);
    node.setAttribute("viewBox", "0 0 " + W + " " + H);
    if (!turns.length) {
      fill(node);
      return;
    }
    const times = turns.map((t) => parseTime(t.at));
    const valid = times.filter(Number.isFinite);
    const t0 = valid.length ? Math.min(...valid) : 0;
    const t1 = valid.length ? Math.max(...valid) : 1;
    const span = Math.max(1, t1 - t0);
    const plotW = W - m.left - m.right;
    const xOf = (i) => (Number.isFinite(times[i]) && t1 > t0 ? m.left + (plotW * (times[i] - t0)) / span : m.left + (plotW * i) / Math.max(1, turns.length - 1));
    const yOf = (id) => m.top + lanes.indexOf(id) * laneH + laneH / 2;
    const nodes = [];
    lanes.forEach((id) => {
      nodes.push(svg("line", { class: "lane", x1: m.left, x2: W - m.right, y1: yOf(id), y2: yOf(id) }));
      nodes.push(svg("text", { class: "axis", x: m.left - 8, y: yOf(id) + 4, "text-anchor": "end" }, id ? (clusterCodes.get(id) || "") + " " + shorten(id, 14) : "unplaced"));
    });
    const points = turns.map((t, i) => xOf(i).toFixed(1) + "," + yOf(str(t.cluster_id)).toFixed(1));
    nodes.push(svg("polyline", { class: "path", points: points.join(" ") }));
    turns.forEach((t, i) => {
      const id = str(t.cluster_id);
      const cls = id ? "dot pal-" + clusterSlots.get(id) : "dot dot-none";
      nodes.push(
        svg(
          "circle",
          { class: cls, "data-flow": str(t.flow), cx: xOf(i), cy: yOf(id), r: 5 },
          svg("title", null, fmtClock(times[i], true) + " · " + (str(t.flow) || "?") + " · " + (id || "no cluster")),
        ),
      );
    });
    fill(node, ...nodes);
  }

  function shorten(s, n) {
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  // ---- prefix

  function renderPrefix(view) {
    const p = obj(view.prefix);
    const ix = obj(p.index);
    byId("prefix-disabled").hidden = p.enabled !== false;
    byId("prefix").setAttribute("data-enabled", String(p.enabled === true));
    const maxBytes = num(ix.max_bytes);
    fill(byId("prefix-index"),
      el(
        "div",
        { class: "meter wide-meter" },
        el("span", { class: "meter-label" }, "memory"),
        maxBytes > 0 ? gauge(ix.bytes, maxBytes) : el("span", { class: "muted" }, "no bound reported"),
        el("span", { class: "meter-value" }, fmtBytes(ix.bytes) + " of " + (maxBytes > 0 ? fmtBytes(maxBytes) : "?")),
      ),
      el(
        "dl",
        { class: "facts inline" },
        fact("nodes", fmtInt(ix.nodes)),
        fact("holders", fmtInt(ix.holders)),
        fact("blocks", fmtInt(ix.blocks)),
        fact("clusters", fmtInt(ix.clusters)),
        fact("marks", fmtInt(ix.marks)),
        fact("lookups", fmtInt(ix.lookups)),
        fact("hits", fmtInt(ix.hits) + " (" + fmtPct(ix.hits, ix.lookups) + ")"),
      ),
    );
    const tiers = obj(p.tiers);
    const tierTotal = Object.values(tiers).reduce((a, v) => a + num(v), 0);
    fill(byId("prefix-tiers"),
      el("span", { class: "meter-label" }, "tiers in the window"),
      tierTotal ? mapBar(tiers, TIER_ORDER, "tier") : el("span", { class: "muted" }, "no prefix-aware requests in the window"),
      pills(tiers, TIER_ORDER, "tier"),
    );
    const hot = arr(p.hottest);
    const body = byId("prefix-body");
    if (!hot.length) {
      fill(body, el("tr", null, el("td", { colspan: 6, class: "empty" }, "No prefix-aware requests in the window.")));
      return;
    }
    fill(body,
      ...hot.map((h) =>
        el(
          "tr",
          { "data-prefix": str(h.prefix) },
          el("td", { class: "mono", title: str(h.prefix) }, shortId(h.prefix)),
          el("td", null, str(h.model)),
          el("td", { class: "num" }, fmtInt(h.requests)),
          el("td", { class: "num" }, fmtOne(h.matched_blocks_mean)),
          el(
            "td",
            { class: "wide" },
            el(
              "span",
              { class: "holders" },
              arr(h.clusters).map((c) =>
                el("span", { class: "holder", "data-cluster-id": str(c.cluster_id) }, chip(str(c.cluster_id)), el("span", { class: "mono" }, str(c.cluster_id)), el("b", null, fmtInt(c.served))),
              ),
            ),
          ),
          el("td", null, pills(h.tiers, TIER_ORDER, "tier")),
        ),
      ),
    );
  }

  // ---- start

  function redrawCharts() {
    if (!state.view) return;
    try {
      renderTimeline(state.view);
      if (state.selected) renderDetail(state.view, arr(obj(state.view.sessions).items));
    } catch (err) {
      console.error("routing page: redrawing charts failed", err);
    }
  }

  function start() {
    loadToken();
    readFiltersFromURL();
    showTokenState();
    bindControls();
    fillWindows(0, state.filters.window);
    byId("f-sessions").value = state.filters.sessions;
    byId("f-flow").value = state.filters.flow;
    writeFiltersToURL();
    document.addEventListener("visibilitychange", onVisibility);
    let resize = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resize);
      resize = setTimeout(redrawCharts, 150);
    });
    // The age ticks between polls so stale data looks stale.
    setInterval(showAge, 1000);
    showStatus();
    if (!document.hidden) poll();
  }

  start();
})();
