// nave hub status page: reads the hub's JSON debug views and draws meshes → clusters →
// services and proxies. Every value from the views goes into text nodes (el()), never markup.
"use strict";

const views = { spokes: "../debug/spokes", syncz: "../debug/syncz", meshes: "../debug/meshes", services: "../debug/services" };
const xdsTypes = [["Cluster", "CDS"], ["Listener", "LDS"], ["ClusterLoadAssignment", "EDS"], ["RouteConfiguration", "RDS"], ["Secret", "SDS"]];
const refreshMs = 2000;
let refreshes = 0;
let timer = null;
let last = null; // the views last read, drawn again when the filter changes

// matches reports whether a proxy or service name passes the filter box.
function matches(name) {
  const f = document.getElementById("filter").value.trim().toLowerCase();
  return f === "" || String(name).toLowerCase().includes(f);
}

// el makes an element with attributes and children (strings become text nodes).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function table(cls, headers, rows) {
  return el("table", { class: cls }, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

// syncState names one proxy's state for one type as navectl proxy-status does.
function syncState(ts) {
  if (!ts || !ts.sentVersion) return "NOT SENT";
  if (ts.nackedVersion && ts.nackedVersion === ts.sentVersion) return "NACKED";
  if (ts.ackedVersion === ts.sentVersion) return "SYNCED";
  return "STALE";
}

function ago(t) {
  if (!t || t.startsWith("0001-")) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(t)) / 1000));
  if (s < 120) return s + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function plural(n, one, many) {
  return n + " " + (n === 1 ? one : many);
}

function sum(obj) {
  return Object.values(obj || {}).reduce((a, b) => a + b, 0);
}

// clusterState is a cluster's state at the hub: missing, withdrawn, stale or connected.
function clusterState(c) {
  if (c.missing) return "missing";
  if (c.withdrawn) return "withdrawn";
  if (!c.connected) return "stale";
  return c.synced ? "synced" : "syncing";
}

function badge(text, cls, title) {
  return el("span", { class: "badge " + cls, title: title }, text);
}

function clustersSection(clusters) {
  if (clusters.length === 0) return el("p", { class: "muted" }, "No cluster has connected.");
  const rows = [];
  for (const c of clusters) {
    const st = clusterState(c);
    const rejected = c.rejected || [];
    rows.push(el("tr", { "data-cluster": c.cluster },
      el("td", {}, c.cluster),
      el("td", {}, badge(st, "st-" + st, c.withdrawn ? c.withdrawn.reason : undefined)),
      el("td", {}, c.connected ? "since " + ago(c.connectedAt) : c.disconnectedAt ? "lost " + ago(c.disconnectedAt) : "—"),
      el("td", {}, ago(c.lastMessageAt)),
      el("td", { class: "num" }, sum(c.resources)),
      el("td", { class: "num" }, c.acks + " / " + c.nacks),
      el("td", { class: "num" + (rejected.length ? " bad" : "") }, rejected.length)));
    for (const r of rejected) {
      const what = [r.kind, [r.namespace, r.name].filter(Boolean).join("/")].filter(Boolean).join(" ");
      rows.push(el("tr", { class: "rejected", "data-rejected": c.cluster + ":" + (r.name || r.file) },
        el("td", {}, ""),
        el("td", { colspan: 6 }, el("span", { class: "badge st-rejected" }, "rejected"), " ",
          el("code", {}, what || r.file), r.file && what ? el("span", { class: "muted" }, " in " + r.file) : null,
          r.field ? el("span", { class: "muted" }, " · " + r.field) : null, ": ", el("span", { class: "reason" }, r.reason))));
    }
  }
  return table("clusters", ["cluster", "state", "stream", "last message", "resources", "acks / nacks", "rejected"], rows);
}

function conflictsSection(m) {
  const parts = [];
  const conflicts = (m && m.conflicts) || [];
  const problems = (m && m.problems) || [];
  if (conflicts.length) {
    parts.push(el("h3", {}, "Cross-cluster conflicts"), table("conflicts", ["kind", "key", "winner", "loser", "reason"],
      conflicts.map((c) => el("tr", { "data-conflict": c.key }, el("td", {}, c.kind), el("td", {}, el("code", {}, c.key)),
        el("td", {}, c.winnerCluster), el("td", {}, c.loserCluster), el("td", { class: "reason" }, c.reason)))));
  }
  if (problems.length) {
    parts.push(el("h3", {}, "Config problems"), table("problems", ["resource", "field", "reason"],
      problems.map((p) => el("tr", { "data-problem": p.resource }, el("td", {}, el("code", {}, p.resource)), el("td", {}, p.field), el("td", { class: "reason" }, p.reason)))));
  }
  return parts;
}

function servicesSection(services) {
  if (!services || services.length === 0) return el("p", { class: "muted" }, matches("\u0000") ? "No services." : "No service matches the filter.");
  return table("services", ["service", "ports", "endpoints by cluster"], services.map((s) => {
    const byCluster = {};
    for (const e of s.endpoints || []) {
      const k = e.cluster || "?";
      byCluster[k] = byCluster[k] || { n: 0, stale: 0, unhealthy: 0 };
      byCluster[k].n++;
      if (e.stale) byCluster[k].stale++;
      if (e.health && e.health !== "healthy") byCluster[k].unhealthy++;
    }
    const eps = Object.keys(byCluster).sort().map((k) => {
      const b = byCluster[k];
      const notes = [b.stale ? b.stale + " stale" : "", b.unhealthy ? b.unhealthy + " not healthy" : ""].filter(Boolean).join(", ");
      return el("span", { class: "ep" + (b.stale ? " stale" : "") }, k + ": " + b.n + (notes ? " (" + notes + ")" : ""));
    });
    return el("tr", { "data-service": s.hostname },
      el("td", {}, el("code", {}, s.hostname), s.external ? el("span", { class: "muted" }, " external") : null),
      el("td", {}, (s.ports || []).map((p) => p.number + "/" + (p.protocol || "?")).join(", ")),
      el("td", {}, eps.length ? eps : el("span", { class: "muted" }, "none")));
  }));
}

function proxiesSection(proxies) {
  if (proxies.length === 0) return el("p", { class: "muted" }, matches("\u0000") ? "No proxy is connected." : "No proxy matches the filter.");
  return table("proxies", ["proxy", "namespace", "type", "connected"].concat(xdsTypes.map((t) => t[1])), proxies.map((p) => {
    const cells = xdsTypes.map(([type]) => {
      const ts = (p.types || {})[type];
      const st = syncState(ts);
      const title = ts ? ["sent " + (ts.sentVersion || "—"), "acked " + (ts.ackedVersion || "—"), ts.nackReason ? "NACK: " + ts.nackReason : ""].filter(Boolean).join("\n") : "not subscribed";
      return el("td", { "data-type": type, "data-state": st }, badge(st, "sync-" + st.replace(" ", "-").toLowerCase(), title),
        st === "NACKED" && ts.nackReason ? el("div", { class: "reason" }, ts.nackReason) : null);
    });
    return el("tr", { "data-proxy": p.nodeId },
      el("td", {}, el("code", {}, p.nodeId), p.delta ? el("span", { class: "muted" }, " delta") : null),
      el("td", {}, p.namespace || ""), el("td", {}, p.proxyType || ""), el("td", {}, ago(p.connectedAt)), cells);
  }));
}

function render(data) {
  // A pod's agent holds a name-table stream beside its Envoy's (DNS
  // proxying): counted apart, not shown as a proxy.
  const agents = data.syncz.filter((p) => p.nameTable).length;
  data = { ...data, syncz: data.syncz.filter((p) => !p.nameTable) };
  const names = new Set();
  for (const c of data.spokes) names.add(c.mesh);
  for (const p of data.syncz) names.add(p.mesh);
  for (const m of data.meshes) names.add(m.mesh);
  for (const k of Object.keys(data.services)) names.add(k);
  const meshByName = Object.fromEntries(data.meshes.map((m) => [m.mesh, m]));
  const out = [];
  let nacked = 0;
  for (const p of data.syncz) {
    if (xdsTypes.some(([t]) => syncState((p.types || {})[t]) === "NACKED")) nacked++;
  }
  for (const name of [...names].sort()) {
    const m = meshByName[name];
    const clusters = data.spokes.filter((c) => c.mesh === name).sort((a, b) => a.cluster.localeCompare(b.cluster));
    const proxies = data.syncz.filter((p) => p.mesh === name && matches(p.nodeId));
    const conflicts = conflictsSection(m);
    out.push(el("section", { class: "mesh", "data-mesh": name },
      el("h2", {}, "mesh ", el("code", {}, name),
        el("span", { class: "muted" }, (m && m.phase && m.phase !== "Active" ? " · " + m.phase : "") +
          (m && m.builtAt ? " · push context v" + m.version + ", built " + ago(m.builtAt) + " · " + m.services + " services" : " · no push context yet"))),
      el("h3", {}, "Clusters"), clustersSection(clusters),
      conflicts,
      el("h3", {}, "Proxies (" + proxies.length + ")"), proxiesSection(proxies),
      el("h3", {}, "Services"), servicesSection((data.services[name] || []).filter((s) => matches(s.hostname)))));
  }
  if (out.length === 0) out.push(el("p", { class: "muted" }, "No mesh to show: no cluster has connected and no proxy is connected."));
  document.getElementById("meshes").replaceChildren(...out);
  const rejected = data.spokes.reduce((a, c) => a + (c.rejected || []).length, 0);
  const conflicts = data.meshes.reduce((a, m) => a + (m.conflicts || []).length, 0);
  document.getElementById("summary").replaceChildren(
    el("span", {}, plural(names.size, "mesh", "meshes")), el("span", {}, plural(data.spokes.length, "cluster", "clusters")),
    el("span", {}, plural(data.syncz.length, "proxy", "proxies")),
    ...(agents ? [el("span", {}, plural(agents, "name-table stream", "name-table streams"))] : []),
    el("span", { class: nacked ? "bad" : "" }, nacked + " NACKed"),
    el("span", { class: rejected ? "bad" : "" }, rejected + " rejected"),
    el("span", { class: conflicts ? "bad" : "" }, plural(conflicts, "conflict", "conflicts")));
}

async function getJSON(url) {
  const resp = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  let body = null;
  try {
    body = await resp.json();
  } catch (e) {
    throw new Error(url + ": " + resp.status + " " + resp.statusText + ", not JSON");
  }
  if (!resp.ok) throw new Error(url + ": " + resp.status + " " + ((body && body.error) || resp.statusText));
  return body;
}

async function refresh() {
  const errBox = document.getElementById("error");
  try {
    const keys = Object.keys(views);
    const values = await Promise.all(keys.map((k) => getJSON(views[k])));
    const data = Object.fromEntries(keys.map((k, i) => [k, values[i] || (k === "services" ? {} : [])]));
    last = data;
    render(data);
    errBox.hidden = true;
    refreshes++;
    document.body.dataset.refreshes = String(refreshes);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    errBox.textContent = "Cannot read the hub: " + e.message;
    errBox.hidden = false;
  }
}

function schedule() {
  clearTimeout(timer);
  timer = null;
  if (document.getElementById("auto").checked) {
    timer = setTimeout(async () => {
      await refresh();
      schedule();
    }, refreshMs);
  }
}

document.getElementById("auto").addEventListener("change", schedule);
document.getElementById("filter").addEventListener("input", () => last && render(last));
refresh().then(schedule);
