// The autograd explorer's script: lays the graph out with dagre, draws it as SVG, steps
// through the forward and the engine's backward, replays a training run, and answers the
// test hook of the URL fragment (#test=cmd;cmd;..., results in <pre id="gs-test">).
(function () {
  'use strict';
  var T0 = performance.now();
  var D = JSON.parse(document.getElementById('gs-data').textContent);
  var SVGNS = 'http://www.w3.org/2000/svg';
  var $ = function (id) { return document.getElementById(id); };

  // ---- the data -------------------------------------------------------------------------
  var nodes = {}, order = [];
  D.nodes.forEach(function (n) { nodes[n.id] = n; order.push(n.id); });
  var modules = {}, moduleOrder = [];
  D.modules.forEach(function (m) { modules[m.path] = m; moduleOrder.push(m.path); m.kids = []; });
  D.modules.forEach(function (m) { if (m.parent && modules[m.parent]) modules[m.parent].kids.push(m.path); });
  // A parameter belongs to the longest module path its name starts with ("1.block.0.weight" -> "1.block.0").
  order.forEach(function (id) {
    var n = nodes[id];
    if (n.kind !== 'param' || n.module) return;
    var best = '';
    moduleOrder.forEach(function (p) { if (id.indexOf(p + '.') === 0 && p.length > best.length) best = p; });
    n.module = best;
  });
  // The module chain of a node, outermost first (only modules the model has).
  function chain(path) {
    var out = [];
    if (!path || !modules[path]) return out;
    for (var p = path; p; p = modules[p] ? modules[p].parent : '') if (modules[p]) out.unshift(p);
    return out;
  }
  order.forEach(function (id) { nodes[id].chain = chain(nodes[id].module); });
  var inEdges = {};
  D.edges.forEach(function (e) { (inEdges[e.to] = inEdges[e.to] || []).push(e); });
  // Ops per module subtree: a module's signature, to fold repeated blocks.
  var subtreeOps = {};
  order.forEach(function (id) {
    var n = nodes[id];
    n.chain.forEach(function (p) { (subtreeOps[p] = subtreeOps[p] || []).push(n.kind === 'param' ? 'p' : n.op); });
  });
  var signature = function (p) { return modules[p].class + ':' + (subtreeOps[p] || []).slice().sort().join(','); };
  // Runs of consecutive siblings of the same class and ops fold into one box ("2-3 Residual x2").
  var folds = [], foldOf = {};
  var siblings = {};
  moduleOrder.forEach(function (p) { (siblings[modules[p].parent] = siblings[modules[p].parent] || []).push(p); });
  Object.keys(siblings).forEach(function (parent) {
    var s = siblings[parent], i = 0;
    while (i < s.length) {
      var j = i + 1;
      while (j < s.length && (subtreeOps[s[i]] || []).length && signature(s[j]) === signature(s[i])) j++;
      if (j - i >= 2) {
        var f = { id: 'fold:' + folds.length, members: s.slice(i, j), parent: parent, open: false };
        folds.push(f);
        f.members.forEach(function (p) { foldOf[p] = f; });
      }
      i = j;
    }
  });
  var expanded = {};  // module path -> true when expanded (all collapsed at first)

  // The backward: each node's step, and the contributions each node will receive.
  var bsteps = D.backward || [];
  var stepOf = {};
  bsteps.forEach(function (s, i) { stepOf[s.node] = i; });
  var fsteps = (D.forward || []).slice();
  if (D.failure && nodes[D.failure.node] && nodes[D.failure.node].kind === 'failed') fsteps.push(D.failure.node);

  // ---- state -------------------------------------------------------------------------------
  var mode = bsteps.length ? 'backward' : 'forward';
  var fstep = fsteps.length ? fsteps.length - 1 : -1, bstep = 0, selected = null, findingIdx = -1;
  var replaySteps = [], replayIdx = 0;

  // ---- formatting ----------------------------------------------------------------------------
  function fmt(v) {
    if (v === null || v === undefined) return 'NaN/Inf';
    if (v === 0) return '0';
    var a = Math.abs(v);
    return (a >= 1e-3 && a < 1e5) ? String(+v.toPrecision(6)) : v.toExponential(3);
  }
  function full(v) { return v === null || v === undefined ? 'NaN/Inf' : String(v); }
  function shapeStr(s) { return s ? '[' + s.join(', ') + ']' : '?'; }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
    });
  }
  function tensorHtml(t, cls) {
    if (!t) return '<span class="note">none</span>';
    var h = '<span class="' + (cls || '') + '">' + esc(t.dtype) + shapeStr(t.shape) + '</span> ';
    if (t.values) h += '<div class="values" data-values="' + t.values.map(full).join(' ') + '">[' +
      t.values.map(fmt).join(', ') + ']</div>';
    h += '<div class="note">norm ' + fmt(t.norm) + ', sum ' + fmt(t.sum) + ', min ' + fmt(t.min) + ', max ' + fmt(t.max) + '</div>';
    return h;
  }

  // ---- what is drawn: modules collapsed or expanded, folds ------------------------------------
  function displayOf(id) {
    var c = nodes[id].chain;
    for (var i = 0; i < c.length; i++) {
      if (!expanded[c[i]]) {
        var f = foldOf[c[i]];
        return f && !f.open ? f.id : 'mod:' + c[i];
      }
    }
    return id;
  }
  function moduleLabel(p) { return p + ' ' + modules[p].class; }

  var measureCtx = document.createElement('canvas').getContext('2d');
  function textWidth(s, size, weight) {
    measureCtx.font = (weight || 'normal') + ' ' + size + 'px system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif';
    return measureCtx.measureText(s).width;
  }

  function boxLines(did) {
    if (did.indexOf('fold:') === 0) {
      var f = folds[+did.slice(5)];
      var a = f.members[0], b = f.members[f.members.length - 1];
      return [a + '\u2013' + b + ' ' + modules[a].class + ' \u00d7' + f.members.length, 'repeated block: click to unfold'];
    }
    if (did.indexOf('mod:') === 0) {
      var p = did.slice(4), ops = (subtreeOps[p] || []).filter(function (o) { return o !== 'p'; }).length;
      return [moduleLabel(p), ops + ' op' + (ops === 1 ? '' : 's') + ' \u2013 click to expand'];
    }
    var n = nodes[did];
    if (n.kind === 'failed') return ['\u2716 ' + n.id + ' failed', 'the forward stopped here'];
    var sub = (n.dtype || '') + shapeStr(n.shape);
    if (n.kind === 'op' && n.view) sub += ' view';
    if (n.kind === 'op' && n.inplace) sub += ' in-place';
    if (n.kind === 'param') sub += ' v' + (n.version_now !== undefined ? n.version_now : n.version);
    if (n.kind === 'output') sub = 'loss ' + (D.loss && D.loss.values ? fmt(D.loss.values[0]) : sub);
    return [n.id, sub];
  }

  // ---- layout and drawing -----------------------------------------------------------------------
  var layoutMs = 0, shown = {}, boxes = {};
  function build() {
    var t = performance.now();
    var g = new dagre.graphlib.Graph({ compound: true, multigraph: false });
    g.setGraph({ rankdir: 'TB', nodesep: 18, ranksep: 34, edgesep: 8, marginx: 16, marginy: 16 });
    g.setDefaultEdgeLabel(function () { return {}; });
    shown = {};
    order.forEach(function (id) {
      var did = displayOf(id);
      if (!shown[did]) shown[did] = [];
      shown[did].push(id);
    });
    Object.keys(shown).forEach(function (did) {
      var lines = boxLines(did);
      var w = Math.max(textWidth(lines[0], 12, 'normal'), textWidth(lines[1], 11)) + 20;
      g.setNode(did, { width: Math.ceil(w), height: 38, lines: lines });
    });
    // Clusters for expanded modules.
    moduleOrder.forEach(function (p) {
      if (!expanded[p]) return;
      var c = modules[p].chain || chain(p);
      for (var i = 0; i < c.length - 1; i++) if (!expanded[c[i]]) return;  // hidden inside a collapsed one
      g.setNode('cl:' + p, { label: moduleLabel(p) });
    });
    moduleOrder.forEach(function (p) {
      if (!g.hasNode('cl:' + p)) return;
      var par = modules[p].parent;
      if (par && g.hasNode('cl:' + par)) g.setParent('cl:' + p, 'cl:' + par);
    });
    Object.keys(shown).forEach(function (did) {
      var host;
      if (did.indexOf('fold:') === 0) host = folds[+did.slice(5)].parent;
      else if (did.indexOf('mod:') === 0) host = modules[did.slice(4)].parent;
      else host = nodes[did].module;
      // The innermost expanded module around it.
      while (host && !g.hasNode('cl:' + host)) host = modules[host] ? modules[host].parent : '';
      if (host) g.setParent(did, 'cl:' + host);
    });
    // Clusters with no box inside are dropped (dagre cannot lay an empty cluster out).
    g.nodes().forEach(function (v) { if (v.indexOf('cl:') === 0 && g.children(v).length === 0) g.removeNode(v); });
    var seen = {};
    D.edges.forEach(function (e) {
      var a = displayOf(e.from), b = displayOf(e.to);
      if (a === b || seen[a + '\u0000' + b]) return;
      seen[a + '\u0000' + b] = true;
      g.setEdge(a, b, { shape: e.shape });
    });
    dagre.layout(g);
    layoutMs = performance.now() - t;
    draw(g);
  }

  var vp = $('viewport'), svg = $('graph'), graphSize = { w: 1, h: 1 }, view = { x: 0, y: 0, k: 1 };
  function el(name, attrs, parent) {
    var e = document.createElementNS(SVGNS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function draw(g) {
    while (vp.firstChild) vp.removeChild(vp.firstChild);
    boxes = {};
    var gl = g.graph();
    graphSize = { w: gl.width || 1, h: gl.height || 1 };
    // Clusters, outermost first (drawn beneath).
    var clusters = g.nodes().filter(function (v) { return v.indexOf('cl:') === 0; });
    clusters.sort(function (a, b) { return a.split('.').length - b.split('.').length; });
    clusters.forEach(function (v) {
      var c = g.node(v), path = v.slice(3);
      var grp = el('g', { 'class': 'cluster', 'data-module': path }, vp);
      el('rect', { x: c.x - c.width / 2, y: c.y - c.height / 2, width: c.width, height: c.height, rx: 6 }, grp);
      var t = el('text', { x: c.x - c.width / 2 + 6, y: c.y - c.height / 2 + 12, 'class': 'cluster-label' }, grp);
      t.textContent = '\u25be ' + c.label;
      t.addEventListener('click', function (ev) { ev.stopPropagation(); toggle(path); });
      el('title', {}, grp).textContent = 'module ' + c.label + ' (click its name to collapse)';
    });
    g.edges().forEach(function (e) {
      var ed = g.edge(e), pts = ed.points || [];
      var grp = el('g', { 'class': 'edge', 'data-from': e.v, 'data-to': e.w }, vp);
      var d = pts.map(function (p, i) { return (i ? 'L' : 'M') + p.x.toFixed(1) + ' ' + p.y.toFixed(1); }).join(' ');
      el('path', { d: d, 'marker-end': 'url(#arrow)' }, grp);
      el('title', {}, grp).textContent = e.v + ' \u2192 ' + e.w + ' ' + shapeStr(ed.shape);
    });
    g.nodes().forEach(function (v) {
      if (v.indexOf('cl:') === 0) return;
      var n = g.node(v), kind;
      if (v.indexOf('fold:') === 0) kind = 'fold';
      else if (v.indexOf('mod:') === 0) kind = 'module';
      else kind = nodes[v].kind;
      if (nodes[v] && nodes[v].failed && kind !== 'failed') kind += ' failed';  // a backward that raised here
      if (nodes[v] && nodes[v].view) kind += ' view';  // shares its input's storage: drawn dashed
      var grp = el('g', { 'class': 'node ' + kind, 'data-id': v, tabindex: '-1' }, vp);
      el('rect', { x: n.x - n.width / 2, y: n.y - n.height / 2, width: n.width, height: n.height, rx: kind === 'op' ? 12 : 4 }, grp);
      var t1 = el('text', { x: n.x, y: n.y - 3, 'text-anchor': 'middle', 'class': 'main' }, grp);
      t1.textContent = n.lines[0];
      var t2 = el('text', { x: n.x, y: n.y + 12, 'text-anchor': 'middle', 'class': 'sub' }, grp);
      t2.textContent = n.lines[1];
      el('title', {}, grp).textContent = n.lines.join('\n');
      grp.addEventListener('click', function (ev) { ev.stopPropagation(); clickBox(v); });
      boxes[v] = { g: grp, x: n.x, y: n.y, w: n.width, h: n.height };
    });
    applyView();
  }

  // ---- pan and zoom ---------------------------------------------------------------------------------
  function applyView() { vp.setAttribute('transform', 'translate(' + view.x + ',' + view.y + ') scale(' + view.k + ')'); }
  function fit() {  // the graph's width fits the pane, at a legible scale; a taller graph pans
    var r = svg.getBoundingClientRect();
    var k = Math.min(1, (r.width - 10) / graphSize.w);
    if (graphSize.h * k < r.height - 10) k = Math.min(1.2, (r.width - 10) / graphSize.w, (r.height - 10) / graphSize.h);
    if (!(k > 0)) k = 1;
    k = Math.max(k, 0.6);
    view = { k: k, x: Math.max(5, (r.width - graphSize.w * k) / 2), y: 5 };
    applyView();
  }
  function centerOn(did) {
    var b = boxes[did];
    if (!b) return;
    var r = svg.getBoundingClientRect();
    var sx = b.x * view.k + view.x, sy = b.y * view.k + view.y;
    if (sx < 20 || sx > r.width - 20 || sy < 20 || sy > r.height - 20) {
      view.x = r.width / 2 - b.x * view.k;
      view.y = r.height / 2 - b.y * view.k;
      applyView();
    }
  }
  (function () {
    var drag = null;
    svg.addEventListener('mousedown', function (e) { drag = { x: e.clientX - view.x, y: e.clientY - view.y }; });
    window.addEventListener('mousemove', function (e) {
      if (!drag) return;
      view.x = e.clientX - drag.x; view.y = e.clientY - drag.y; applyView();
    });
    window.addEventListener('mouseup', function () { drag = null; });
    svg.addEventListener('wheel', function (e) {
      e.preventDefault();
      var r = svg.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
      var k2 = Math.min(4, Math.max(0.1, view.k * (e.deltaY < 0 ? 1.15 : 1 / 1.15)));
      view.x = mx - (mx - view.x) * k2 / view.k; view.y = my - (my - view.y) * k2 / view.k; view.k = k2;
      applyView();
    }, { passive: false });
  })();

  // ---- expand and collapse ------------------------------------------------------------------------
  function toggle(path) {
    if (expanded[path]) {
      expanded[path] = false;
      Object.keys(expanded).forEach(function (p) { if (p.indexOf(path + '.') === 0) expanded[p] = false; });
    } else {
      modules[path].chain = modules[path].chain || chain(path);
      modules[path].chain.forEach(function (p) { expanded[p] = true; if (foldOf[p]) foldOf[p].open = true; });
    }
    rebuild();
  }
  function reveal(id) {  // expands what hides a node
    if (!nodes[id]) return;
    nodes[id].chain.forEach(function (p) { expanded[p] = true; if (foldOf[p]) foldOf[p].open = true; });
  }
  function clickBox(did) {
    if (did.indexOf('fold:') === 0) { folds[+did.slice(5)].open = true; rebuild(); return; }
    if (did.indexOf('mod:') === 0) { selected = did; toggle(did.slice(4)); return; }
    selected = did;
    if (mode === 'backward' && stepOf[did] !== undefined) bstep = stepOf[did];
    if (mode === 'forward' && fsteps.indexOf(did) >= 0) fstep = fsteps.indexOf(did);
    refresh();
  }
  function rebuild() { build(); refresh(); }

  // ---- stepping ----------------------------------------------------------------------------------
  // Contributions each node has received after backward step `upto` (inclusive), and how many it will get.
  function arrived(upto) {
    var got = {};
    bsteps.forEach(function (s, j) {
      if (j <= upto) return;
      var k = 0;
      s.incoming.forEach(function (c) { if (c.from === 'seed' || (stepOf[c.from] !== undefined && stepOf[c.from] <= upto)) k++; });
      if (k) got[s.node] = k;
    });
    return got;
  }
  function currentId() {
    if (mode === 'forward') return fsteps[fstep];
    if (mode === 'backward') return bsteps.length ? bsteps[bstep].node : null;
    return null;
  }
  function refresh() {
    var cur = currentId();
    var state = {};
    if (mode === 'forward') {
      fsteps.forEach(function (id, i) { state[id] = i < fstep ? 'done' : i === fstep ? 'current' : 'future'; });
    } else if (mode === 'backward') {
      var got = arrived(bstep - 1);
      bsteps.forEach(function (s, i) {
        if (i < bstep) state[s.node] = 'done';
        else if (i === bstep) state[s.node] = 'current';
        else state[s.node] = got[s.node] ? 'partial' : 'future';
      });
      Object.keys(got).forEach(function (id) {
        if (state[id] !== 'partial') return;
        state[id] = 'partial:' + got[id] + '/' + bsteps[stepOf[id]].incoming.length;
      });
    }
    // Findings: the nodes the active one names, and the lead's.
    var hits = {}, leads = {};
    (D.findings || []).forEach(function (f, i) {
      f.nodes.forEach(function (id) { if (f.lead) leads[displayOf(id)] = true; if (i === findingIdx) hits[displayOf(id)] = true; });
    });
    Object.keys(boxes).forEach(function (did) {
      var b = boxes[did], members = shown[did] || [did], st = '';
      var rank = { current: 4, partial: 3, done: 2, future: 1 };
      members.forEach(function (id) {
        var s = state[id] ? state[id].split(':')[0] : '';
        if (s && (!st || rank[s] > rank[st])) st = s;
      });
      var cls = b.g.getAttribute('class').split(' ').filter(function (c) {
        return ['current', 'done', 'future', 'partial', 'selected', 'hit', 'lead'].indexOf(c) < 0;
      });
      if (st && mode !== 'replay') cls.push(st);
      if (did === selected) cls.push('selected');
      if (hits[did]) cls.push('hit');
      if (leads[did]) cls.push('lead');
      b.g.setAttribute('class', cls.join(' '));
      var old = b.g.querySelector('.badge');
      if (old) old.parentNode.removeChild(old);
      if (mode === 'backward' && members.length === 1 && state[did] && state[did].indexOf('partial:') === 0) {
        var t = el('text', { x: b.x + b.w / 2 - 2, y: b.y - b.h / 2 - 3, 'text-anchor': 'end', 'class': 'badge' }, b.g);
        t.textContent = state[did].split(':')[1] + ' arrived';
      }
    });
    // The edges of the current step.
    var curBox = cur ? displayOf(cur) : null;
    vp.querySelectorAll('g.edge').forEach(function (e) {
      var on = curBox && (mode === 'backward' ? e.getAttribute('data-to') === curBox : e.getAttribute('data-to') === curBox);
      e.setAttribute('class', on ? 'edge active' : 'edge');
    });
    if (cur && mode !== 'replay') centerOn(curBox);
    stepLabel();
    details();
    findingsPane();
  }
  function stepLabel() {
    var s;
    if (mode === 'forward') s = fsteps.length ? 'forward ' + (fstep + 1) + ' / ' + fsteps.length + ': ' + fsteps[fstep] : 'no forward recorded';
    else if (mode === 'backward') s = bsteps.length ? 'backward ' + (bstep + 1) + ' / ' + bsteps.length + ': ' + bsteps[bstep].node : 'no backward recorded';
    else s = replaySteps.length ? 'replay: step ' + replaySteps[replayIdx] : 'no training run recorded';
    $('step-label').textContent = s;
    ['forward', 'backward', 'replay'].forEach(function (m) { $('mode-' + m).setAttribute('aria-selected', m === mode ? 'true' : 'false'); });
    $('replay-pane').hidden = mode !== 'replay';
  }

  // ---- the side panel ---------------------------------------------------------------------------
  function nodeTable(n) {
    var rows = [];
    var add = function (k, v) { rows.push('<tr><th>' + esc(k) + '</th><td>' + v + '</td></tr>'); };
    add('kind', esc(n.kind) + (n.kind === 'op' ? ' <code>' + esc(n.op) + '</code>' : ''));
    if (n.module) add('module', esc(n.module) + (modules[n.module] ? ' (' + esc(modules[n.module].class) + ')' : ''));
    if (n.shape) add('output', esc((n.dtype || '') + shapeStr(n.shape)) + (n.device ? ' on ' + esc(n.device) : ''));
    if (n.strides) add('layout', 'strides ' + shapeStr(n.strides) + ', offset ' + n.offset + ', storage #' + n.storage +
      (n.view ? ' <b>(a view)</b>' : ''));
    if (n.view) {
      var sharers = order.filter(function (id) { return id !== n.id && nodes[id].storage === n.storage; });
      add('shares storage with', sharers.map(esc).join(', ') || 'its base');
    }
    if (n.version !== undefined) add('version', n.version + (n.version_now !== undefined && n.version_now !== n.version ? ' (now ' + n.version_now + ')' : ''));
    if (n.inplace) add('in-place', 'yes: modified its input, whose version moved');
    var ins = (inEdges[n.id] || []).slice().sort(function (a, b) { return a.input - b.input; });
    if (ins.length) add('inputs', ins.map(function (e) { return esc(e.from) + ' ' + shapeStr(e.shape); }).join('<br/>'));
    if (n.saved) add('saved for backward', n.saved.length ? n.saved.map(function (s) {
      return esc(s.by) + ': ' + (s.output ? 'its output ' : '') + esc(s.dtype) + shapeStr(s.shape) + ' at version ' + s.version;
    }).join('<br/>') : 'nothing (shapes only)');
    if (n.released) add('saved tensors', 'freed after backward');
    if (n.grad) add('.grad', tensorHtml(n.grad));
    return '<table>' + rows.join('') + '</table>';
  }
  function details() {
    var h = '';
    if (mode === 'backward' && bsteps.length) {
      var s = bsteps[bstep], n = nodes[s.node] || { id: s.node, kind: '?' };
      h += '<h2>Backward step ' + (bstep + 1) + ': <code>' + esc(s.node) + '</code></h2>';
      h += '<p class="note">The engine runs a node once every node that uses its output has sent its gradient ' +
        '(a topological order). This one received ' + s.incoming.length + ' contribution' + (s.incoming.length === 1 ? '' : 's') + ':</p>';
      h += '<table id="step-incoming"><tr><th>from</th><th>gradient</th></tr>';
      s.incoming.forEach(function (c) {
        h += '<tr><td>' + (c.from === 'seed' ? 'the seed (d loss / d loss = 1)' : esc(c.from) + ' input ' + c.input) +
          '</td><td>' + tensorHtml(c.grad) + '</td></tr>';
      });
      h += '</table>';
      h += '<p>' + (s.incoming.length > 1 ? 'Their sum, the gradient it ran with:' : 'The gradient it ran with:') + '</p><div id="step-sum" class="sum" data-node="' +
        esc(s.node) + '">' + tensorHtml(s.grad) + '</div>';
      if (s.leaf_grad) h += '<p>What lands in <code>' + esc(s.node) + '.grad</code>' +
        (s.leaf_grad && s.grad && s.leaf_grad.sum !== s.grad.sum ? ' (added to what was there)' : '') +
        ':</p><div id="step-leaf-grad" class="sum">' + tensorHtml(s.leaf_grad) + '</div>';
      if (!s.ran) h += '<p class="note">Not run: no gradient arrived for it.</p>';
      // What goes wrong too early.
      var got = arrived(bstep - 1), early = [];
      bsteps.forEach(function (t, i) { if (i > bstep && got[t.node]) early.push(t.node + ' (' + got[t.node] + ' of ' + t.incoming.length + ')'); });
      if (early.length) h += '<p class="note warn">Waiting: ' + early.map(esc).join(', ') + '. Run now, such a node would ' +
        'pass on only the part of its gradient that has arrived: the rest would be lost.</p>';
      if (D.failure && s.node === D.failure.node) h += failureHtml();
      h += nodeTable(n);
    } else if (mode === 'forward' && fsteps.length) {
      var id = selected && nodes[selected] ? selected : fsteps[fstep];
      h += '<h2>' + (fsteps.indexOf(id) >= 0 ? 'Forward ' + (fsteps.indexOf(id) + 1) + ': ' : '') + '<code>' + esc(id) + '</code></h2>';
      if (D.failure && id === D.failure.node) h += failureHtml();
      h += nodeTable(nodes[id]);
    } else if (selected && nodes[selected]) {
      h += '<h2><code>' + esc(selected) + '</code></h2>' + nodeTable(nodes[selected]);
    }
    if (selected && selected.indexOf('mod:') === 0) {
      var p = selected.slice(4);
      h += '<h2>module ' + esc(moduleLabel(p)) + '</h2><p class="note">' + (expanded[p] ? 'expanded' : 'collapsed') +
        ': press e to ' + (expanded[p] ? 'collapse' : 'expand') + '</p>';
    }
    $('details').innerHTML = h;
  }
  function failureHtml() {
    var f = D.failure, shapes = (f.message.match(/\[[0-9, ]*\]/g) || []);
    return '<div class="failure"><p><b>The ' + esc(f.phase) + ' failed at <code>' + esc(f.op) + '</code>' +
      (f.module ? ' in module ' + esc(f.module) : '') + '.</b></p><p class="values">' + esc(f.message) + '</p>' +
      (shapes.length ? '<p>Shapes involved: ' + shapes.map(esc).join(', ') + '</p>' : '') + '</div>';
  }
  function findingsPane() {
    var fs = D.findings || [];
    if (!fs.length) { $('findings-pane').innerHTML = ''; return; }
    var h = '<h2>Findings</h2><ol>';
    fs.forEach(function (f, i) {
      h += '<li data-i="' + i + '" class="' + (i === findingIdx ? 'active' : '') + '"><span class="sev-' + f.severity + '">[' +
        esc(f.check) + ']</span> ' + (f.lead ? '<b>lead:</b> ' : '') + esc(f.title) +
        (f.nodes.length ? ' <span class="note">(' + f.nodes.length + ' node' + (f.nodes.length === 1 ? '' : 's') + ')</span>' : '') +
        (i === findingIdx && f.cause ? '<div class="note">' + esc(f.cause) + '</div>' : '') + '</li>';
    });
    $('findings-pane').innerHTML = h + '</ol>';
    $('findings-pane').querySelectorAll('li').forEach(function (li) {
      li.addEventListener('click', function () { gotoFinding(+li.getAttribute('data-i')); });
    });
  }
  function gotoFinding(i) {
    var fs = D.findings || [];
    if (!fs.length) return;
    findingIdx = (i + fs.length) % fs.length;
    var f = fs[findingIdx];
    if (f.nodes.length) { reveal(f.nodes[0]); selected = f.nodes[0]; build(); }
    refresh();
    if (f.nodes.length) centerOn(displayOf(f.nodes[0]));
  }

  // ---- the replay -----------------------------------------------------------------------------------
  var R = D.replay;
  function at(series, step) {  // the value recorded at the last sampled step <= step
    if (!series) return undefined;
    var v;
    for (var i = 0; i < series.length && series[i][0] <= step; i++) v = series[i][1];
    return v;
  }
  function setupReplay() {
    if (!R) { $('mode-replay').disabled = true; return; }
    var steps = {};
    ['grad_norm', 'update_ratio', 'dead', 'weight_norm'].forEach(function (k) {
      Object.keys(R[k] || {}).forEach(function (name) { R[k][name].forEach(function (p) { steps[p[0]] = true; }); });
    });
    replaySteps = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
    var sl = $('replay-slider');
    sl.max = Math.max(0, replaySteps.length - 1);
    sl.value = 0;
    sl.addEventListener('input', function () { replayIdx = +sl.value; replayView(); });
  }
  function replayView() {
    if (!R || !replaySteps.length) return;
    var step = replaySteps[replayIdx];
    $('replay-step').textContent = step;
    $('replay-slider').value = replayIdx;
    stepLabel();
    // The loss curve with the step marked.
    var L = R.loss || [], w = 340, hgt = 80, lo = Infinity, hi = -Infinity;
    L.forEach(function (v) { if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    var pts = L.map(function (v, i) {
      return v === null ? null : ((i / Math.max(1, L.length - 1)) * (w - 10) + 5).toFixed(1) + ',' + (hgt - 12 - (v - lo) / Math.max(1e-12, hi - lo) * (hgt - 24) + 6).toFixed(1);
    }).filter(Boolean).join(' ');
    var mx = ((step - 1) / Math.max(1, L.length - 1)) * (w - 10) + 5;
    $('replay-loss').innerHTML = '<svg viewBox="0 0 ' + w + ' ' + hgt + '" role="img" aria-label="training loss"><polyline points="' + pts +
      '"/><line x1="' + mx.toFixed(1) + '" x2="' + mx.toFixed(1) + '" y1="4" y2="' + (hgt - 8) + '"/><text x="5" y="' + (hgt - 1) +
      '">loss per step: ' + fmt(lo) + ' .. ' + fmt(hi) + (L[step - 1] !== undefined ? ', at this step ' + fmt(L[step - 1]) : '') + '</text></svg>';
    var h = '<h2>Parameters</h2><table id="replay-params"><tr><th>parameter</th><th>grad norm</th><th>update / weight</th><th>weight norm</th></tr>';
    Object.keys(R.grad_norm || {}).forEach(function (name) {
      var gn = at(R.grad_norm[name], step), ur = at((R.update_ratio || {})[name], step), wn = at((R.weight_norm || {})[name], step);
      h += '<tr data-param="' + esc(name) + '"><td><a href="#" data-node="' + esc(name) + '">' + esc(name) + '</a></td><td class="num gn" data-value="' +
        full(gn) + '">' + (gn === undefined ? '' : fmt(gn)) + '</td><td class="num">' + (ur === undefined ? '' : fmt(ur)) +
        '</td><td class="num">' + (wn === undefined ? '' : fmt(wn)) + '</td></tr>';
    });
    h += '</table><h2>Layers</h2><table id="replay-layers"><tr><th>layer</th><th>mean</th><th>std</th><th title="fraction of ReLU units that are 0">dead</th><th title="fraction of Tanh/Sigmoid outputs within 1% of their bounds">sat.</th></tr>';
    var layers = {};
    ['out_mean', 'out_std', 'dead', 'saturation'].forEach(function (k) { Object.keys(R[k] || {}).forEach(function (n) { layers[n] = true; }); });
    Object.keys(layers).forEach(function (name) {
      var cell = function (k) { var v = at((R[k] || {})[name], step); return '<td class="num">' + (v === undefined ? '' : fmt(v)) + '</td>'; };
      h += '<tr><td>' + esc(name) + '</td>' + cell('out_mean') + cell('out_std') + cell('dead') + cell('saturation') + '</tr>';
    });
    $('replay-tables').innerHTML = h + '</table>';
    $('replay-tables').querySelectorAll('a[data-node]').forEach(function (a) {
      a.addEventListener('click', function (e) {
        e.preventDefault();
        var id = a.getAttribute('data-node');
        if (nodes[id]) { reveal(id); selected = id; build(); refresh(); centerOn(displayOf(id)); }
      });
    });
    // Parameters coloured by their gradient norm at this step (log scale over the run).
    var all = [];
    Object.keys(R.grad_norm || {}).forEach(function (n) { R.grad_norm[n].forEach(function (p) { if (p[1] > 0) all.push(Math.log10(p[1])); }); });
    var glo = Math.min.apply(null, all.concat([0])), ghi = Math.max.apply(null, all.concat([0]));
    Object.keys(boxes).forEach(function (did) {
      var rect = boxes[did].g.querySelector('rect');
      var gn;  // a parameter's, or for a collapsed module the largest of its parameters'
      (shown[did] || [did]).forEach(function (id) {
        var v = R.grad_norm && R.grad_norm[id] ? at(R.grad_norm[id], step) : undefined;
        if (v !== undefined && (gn === undefined || v > gn)) gn = v;
      });
      if (gn === undefined) { rect.style.fill = ''; return; }
      var t = gn > 0 ? (Math.log10(gn) - glo) / Math.max(1e-9, ghi - glo) : 0;
      rect.style.fill = 'hsl(' + Math.round(220 - 200 * t) + ', 70%, 55%)';
    });
  }
  function clearReplayColours() {
    Object.keys(boxes).forEach(function (did) { boxes[did].g.querySelector('rect').style.fill = ''; });
  }

  // ---- modes, keys, theme ----------------------------------------------------------------------------
  function setMode(m) {
    if (m === 'replay' && !R) return;
    mode = m;
    if (m !== 'replay') clearReplayColours();
    refresh();
    if (m === 'replay') replayView();
  }
  function stepBy(d) {
    if (mode === 'forward' && fsteps.length) fstep = Math.max(0, Math.min(fsteps.length - 1, fstep + d));
    else if (mode === 'backward' && bsteps.length) bstep = Math.max(0, Math.min(bsteps.length - 1, bstep + d));
    else if (mode === 'replay' && replaySteps.length) { replayIdx = Math.max(0, Math.min(replaySteps.length - 1, replayIdx + d)); replayView(); return; }
    selected = null;
    refresh();
  }
  function setTheme(t) {
    document.documentElement.setAttribute('data-theme', t);
    try { localStorage.setItem('gs-explore-theme', t); } catch (e) { /* file:// may refuse storage */ }
  }
  function currentTheme() {
    var t = document.documentElement.getAttribute('data-theme');
    if (t) return t;
    return window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
  }
  try { var saved = localStorage.getItem('gs-explore-theme'); if (saved) setTheme(saved); } catch (e) { /* none */ }
  $('theme').addEventListener('click', function () { setTheme(currentTheme() === 'dark' ? 'light' : 'dark'); });
  $('mode-forward').addEventListener('click', function () { setMode('forward'); });
  $('mode-backward').addEventListener('click', function () { setMode('backward'); });
  $('mode-replay').addEventListener('click', function () { setMode('replay'); });
  $('prev').addEventListener('click', function () { stepBy(-1); });
  $('next').addEventListener('click', function () { stepBy(1); });
  $('fit').addEventListener('click', fit);
  $('help-button').addEventListener('click', function () { $('help').hidden = !$('help').hidden; });
  $('expand-all').addEventListener('click', function () {
    moduleOrder.forEach(function (p) { expanded[p] = true; });
    folds.forEach(function (f) { f.open = true; });
    rebuild(); fit();
  });
  $('collapse-all').addEventListener('click', function () {
    expanded = {};
    folds.forEach(function (f) { f.open = false; });
    rebuild(); fit();
  });
  svg.addEventListener('click', function () { selected = null; refresh(); });
  document.addEventListener('keydown', function (e) {
    if (e.target && (e.target.tagName === 'INPUT' && e.key !== 'ArrowLeft' && e.key !== 'ArrowRight')) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var k = e.key;
    if (k === 'ArrowRight') { stepBy(1); e.preventDefault(); }
    else if (k === 'ArrowLeft') { stepBy(-1); e.preventDefault(); }
    else if (k === 'Home') stepBy(-1e9);
    else if (k === 'End') stepBy(1e9);
    else if (k === 'f') setMode('forward');
    else if (k === 'b') setMode('backward');
    else if (k === 'r') setMode('replay');
    else if (k === 'n') gotoFinding(findingIdx + 1);
    else if (k === 'N') gotoFinding(findingIdx - 1);
    else if (k === 'x') $('expand-all').click();
    else if (k === 'c') $('collapse-all').click();
    else if (k === '0') fit();
    else if (k === 't') $('theme').click();
    else if (k === '?') $('help-button').click();
    else if (k === 'e') {
      var target = selected || (currentId() ? displayOf(currentId()) : null);
      if (target && target.indexOf('mod:') === 0) toggle(target.slice(4));
      else if (target && target.indexOf('fold:') === 0) clickBox(target);
      else if (target && nodes[target] && nodes[target].chain.length) toggle(nodes[target].chain[nodes[target].chain.length - 1]);
    } else return;
  });

  // ---- start -----------------------------------------------------------------------------------------
  if (D.failure) {
    var fb = $('failure-banner');
    fb.hidden = false;
    fb.textContent = 'The ' + D.failure.phase + ' failed at ' + D.failure.node + (D.failure.module ? ' in module ' + D.failure.module : '') +
      ': ' + D.failure.message;
    if (D.failure.node) reveal(D.failure.node);
    if (D.failure.phase === 'backward' && stepOf[D.failure.node] !== undefined) {
      mode = 'backward';
      bstep = stepOf[D.failure.node];
    } else {
      mode = 'forward';
      fstep = fsteps.length - 1;
    }
  }
  if (D.left_out) {
    var lb = $('failure-banner');
    lb.hidden = false;
    lb.textContent = (D.failure ? lb.textContent + '\n' : '') + D.left_out + ' more nodes were left out of this page (ExploreOptions::max_nodes).';
  }
  setupReplay();
  build();
  fit();
  refresh();
  var readyMs = performance.now() - T0, openMs = performance.now();  // since the script began; since navigation began

  // ---- the test hook: #test=cmd;cmd;... -------------------------------------------------------------
  // expand:PATH | backward:NODE | forward:NODE | replay:STEP:PARAM | failure | layout | mode:M | theme:T | finding:I | fit
  function overlaps() {  // pairs of labels (node texts, cluster names) whose boxes intersect
    var ts = vp.querySelectorAll('g.node text.main, g.node text.sub, g.node text.badge, g.cluster text'), bx = [], bad = [];
    ts.forEach(function (t) { var r = t.getBoundingClientRect(); if (r.width > 0) bx.push([r, t.textContent]); });
    for (var i = 0; i < bx.length; i++)
      for (var j = i + 1; j < bx.length; j++) {
        var a = bx[i][0], b = bx[j][0], e = 0.5;
        if (a.left < b.right - e && b.left < a.right - e && a.top < b.bottom - e && b.top < a.bottom - e) bad.push(bx[i][1] + ' / ' + bx[j][1]);
      }
    return { labels: bx.length, bad: bad };
  }
  function runTests(cmds) {
    var out = [];
    cmds.forEach(function (cmd) {
      var a = cmd.split(':');
      try {
        if (a[0] === 'expand') {
          var p = a.slice(1).join(':');
          if (!modules[p]) { out.push('FAIL expand ' + p + ': no such module'); return; }
          var before = Object.keys(boxes).length;
          if (!expanded[p]) toggle(p);
          var inside = Object.keys(boxes).filter(function (d) { return nodes[d] && nodes[d].chain.indexOf(p) >= 0; });
          out.push('expanded ' + p + ' boxes ' + before + ' -> ' + Object.keys(boxes).length + ' inside ' + inside.length +
                   ' cluster ' + (vp.querySelector('g.cluster[data-module="' + p + '"]') ? 'yes' : 'no'));
        } else if (a[0] === 'mode') {
          setMode(a[1]);
          out.push('mode ' + mode);
        } else if (a[0] === 'backward') {
          var id = a.slice(1).join(':');
          setMode('backward');
          if (stepOf[id] === undefined) { out.push('FAIL backward ' + id + ': no such step'); return; }
          // Walk there with the keyboard, as a student would.
          while (bstep < stepOf[id]) document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight' }));
          while (bstep > stepOf[id]) document.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowLeft' }));
          var sum = document.querySelector('#step-sum .values'), leaf = document.querySelector('#step-leaf-grad .values');
          var rows = document.querySelectorAll('#step-incoming tr').length - 1;
          out.push('backward ' + id + ' step ' + (bstep + 1) + ' contributions ' + rows + ' sum ' +
                   (sum ? sum.getAttribute('data-values') : 'none') + ' grad ' + (leaf ? leaf.getAttribute('data-values') : 'none') +
                   ' current ' + (document.querySelector('g.node.current') ? document.querySelector('g.node.current').getAttribute('data-id') : 'none'));
        } else if (a[0] === 'forward') {
          setMode('forward');
          var fid = a.slice(1).join(':');
          fstep = Math.max(0, fsteps.indexOf(fid));
          refresh();
          out.push('forward ' + fid + ' step ' + (fstep + 1));
        } else if (a[0] === 'replay') {
          setMode('replay');
          var step = +a[1], param = a.slice(2).join(':');
          var sl = $('replay-slider'), idx = replaySteps.indexOf(step);
          if (idx < 0) { out.push('FAIL replay: no sampled step ' + step + ' (steps ' + replaySteps.join(',') + ')'); return; }
          sl.value = idx;
          sl.dispatchEvent(new Event('input'));
          var cell = document.querySelector('#replay-params tr[data-param="' + param + '"] td.gn');
          out.push('replay step ' + $('replay-step').textContent + ' ' + param + ' grad_norm ' + (cell ? cell.getAttribute('data-value') : 'none'));
        } else if (a[0] === 'failure') {
          var fn = vp.querySelector('g.node.failed');
          out.push('failure ' + (fn ? fn.getAttribute('data-id') + ' marked' : 'none') + ' banner ' +
                   ($('failure-banner').hidden ? 'hidden' : 'shown') + ' ops-before ' + (D.forward || []).length +
                   ' message ' + (D.failure ? D.failure.message.slice(0, 200) : ''));
        } else if (a[0] === 'layout') {
          var ov = overlaps();
          out.push('layout ms ' + Math.round(layoutMs) + ' ready ms ' + Math.round(readyMs) + ' open ms ' + Math.round(openMs) + ' boxes ' + Object.keys(boxes).length +
                   ' labels ' + ov.labels + ' overlaps ' + ov.bad.length + (ov.bad.length ? ' ' + ov.bad.slice(0, 5).join(' | ') : ''));
        } else if (a[0] === 'expandall') {
          $('expand-all').click();
          out.push('expanded all boxes ' + Object.keys(boxes).length);
        } else if (a[0] === 'theme') {
          setTheme(a[1]);
          out.push('theme ' + currentTheme());
        } else if (a[0] === 'finding') {
          gotoFinding(+a[1]);
          out.push('finding ' + findingIdx + ' ' + ((D.findings || [])[findingIdx] || {}).check);
        } else if (a[0] === 'select') {
          var sid = a.slice(1).join(':');
          reveal(sid); selected = sid; build(); refresh(); centerOn(displayOf(sid));
          out.push('selected ' + sid);
        } else if (a[0] === 'fit') {
          fit();
        } else if (a[0] !== '') {
          out.push('FAIL unknown test command ' + cmd);
        }
      } catch (err) {
        out.push('FAIL ' + cmd + ': ' + err);
      }
    });
    var pre = $('gs-test');
    pre.textContent = out.join('\n');
    pre.setAttribute('data-done', '1');
  }
  var frag = decodeURIComponent(location.hash.slice(1));
  var m = /(?:^|&)(test|view)=([^&]*)/.exec(frag);
  if (m) runTests(m[2].split(';'));
  window.gsExplore = { data: D, run: runTests };
})();
