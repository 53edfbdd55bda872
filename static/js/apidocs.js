// The API reference page (/api/docs/): every operation of the OpenAPI document (/api/schema/), by tag. Built with
// textContent only (no innerHTML of schema text), no inline script (CSP), no CDN.
(function () {
  "use strict";
  const root = document.getElementById("apidocs");
  if (!root) return;
  const el = (tag, attrs, ...kids) => {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    for (const k of kids) n.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return n;
  };
  const resolve = (doc, s) => (s && s.$ref ? s.$ref.split("/").slice(1).reduce((o, k) => o[k], doc) : s);
  const schemaText = (doc, s) => JSON.stringify(resolve(doc, s), (k, v) => (v && v.$ref ? resolve(doc, v) : v), 1);

  function params(list) {
    if (!list.length) return el("p", {}, "No parameters.");
    const t = el("table", {}, el("tr", {}, ...["name", "in", "type", "description"].map((h) => el("th", {}, h))));
    for (const p of list) {
      const s = p.schema || {};
      const range = s.minimum !== undefined ? ` [${s.minimum}, ${s.maximum}]`
        : (s.enum ? ` ∈ {${s.enum.join(", ")}}` : "");
      t.append(el("tr", {}, el("td", {}, el("code", {}, p.name + (p.required ? " *" : ""))), el("td", {}, p.in),
        el("td", {}, (s.type || "") + range), el("td", {}, p.description || "")));
    }
    return t;
  }

  function operation(doc, path, method, op) {
    const id = `${method}-${path}`.replace(/[^A-Za-z0-9]+/g, "-");
    const box = el("article", {class: "op", id, "data-testid": "apidocs-op"},
      el("h3", {}, el("span", {class: `method ${method}`}, method), " ",
        el("code", {class: "path"}, doc.servers[0].url + path)),
      el("p", {}, op.summary || ""));
    if (op.description) box.append(el("p", {}, op.description));
    box.append(params(op.parameters || []));
    const body = op.requestBody && op.requestBody.content["application/json"];
    if (body) box.append(el("details", {}, el("summary", {}, "Request body (JSON)"), el("pre", {}, schemaText(doc,
      body.schema))));
    const rs = el("ul", {});
    for (const [code, r] of Object.entries(op.responses)) {
      const [media, c] = Object.entries(r.content || {})[0] || ["", {}];
      const li = el("li", {}, el("strong", {}, code), ` ${r.description} `, el("code", {}, media));
      if (c.schema && media === "application/json") li.append(el("details", {}, el("summary", {}, "schema"),
        el("pre", {}, schemaText(doc, c.schema))));
      rs.append(li);
    }
    box.append(el("div", {}, "Responses:"), rs);
    return [id, box];
  }

  async function main() {
    const ops = document.getElementById("apidocs-ops");
    let doc;
    try {
      const r = await fetch(root.dataset.schemaUrl);
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      doc = await r.json();
    } catch (e) {
      ops.textContent = `Could not load the schema: ${e.message}`;
      return;
    }
    document.getElementById("apidocs-intro").textContent = doc.info.description;
    const groups = new Map();
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const tag = (op.tags || ["other"])[0];
        if (!groups.has(tag)) groups.set(tag, []);
        groups.get(tag).push(operation(doc, path, method, op));
      }
    }
    ops.replaceChildren();
    const toc = document.getElementById("apidocs-toc");
    for (const [tag, list] of [...groups.entries()].sort()) {
      ops.append(el("h2", {id: `tag-${tag}`}, tag));
      toc.append(el("a", {href: `#tag-${tag}`}, tag), " ");
      for (const [, box] of list) ops.append(box);
    }
  }
  main();
})();
