// The operator page. It polls /ops/metrics.json (the edge's Prometheus
// registry as JSON, the fleet's when the edge has Redis) and draws live
// charts with time axes; with an operator token it also shows the waiting
// room (armed, frozen, halved, rates, lines) with its controls and this
// edge's live sessions with a revoke button. The token: in dev the page
// mints one from /ops/dev-token; in prod the operator pastes one
// (`egbe-edge operator-token`), kept for this tab only. window.opsState
// exposes what was drawn and done, for the browser test.
const COLORS = ['#5dade2', '#f5b041', '#58d68d', '#ec7063', '#af7ac5', '#48c9b0', '#f4d03f', '#dc7633', '#85929e'];
// Series of one chart also differ by dash and marker, so lines that
// overlap (two counters both at zero) stay distinguishable.
const DASHES = [[], [12, 6], [3, 5], [14, 5, 3, 5], [6, 3], [2, 2]];
const MARKERS = ['circle', 'square', 'triangle', 'diamond', 'cross', 'plus'];
const HISTORY = 150; // points kept per series
const TOKEN_KEY = 'egbe.opsToken';

// Each chart: a title, the metric families it reads, how to label a series,
// whether to plot a rate (per second) or the value, and whether the value
// counts things (integer ticks and legend values).
const CHARTS = [
  { id: 'sessions', title: 'Sessions by transport', families: ['egbe_shard_sessions'], by: 'transport', int: true },
  { id: 'handshakes', title: 'Handshakes by outcome (per s)', families: ['egbe_shard_handshakes_total'], by: 'outcome', rate: true },
  { id: 'refusals', title: 'Refusals by reason (per s)', families: ['egbe_shard_handshakes_total', 'egbe_admission_refusals_total'], by: 'reason', rate: true,
    filter: (l) => (l.outcome === undefined || l.outcome === 'rejected') && l.reason },
  { id: 'links', title: 'Shard links up', families: ['egbe_shard_link_up'], by: 'shard', int: true },
  { id: 'linkrtt', title: 'Shard link RTT (ms)', families: ['egbe_shard_link_rtt_seconds'], by: 'shard', scale: 1000 },
  { id: 'sfu', title: 'SFU packets (per s)', families: ['egbe_sfu_packets_forwarded_total', 'egbe_sfu_packets_dropped_total'], by: '__name__', rate: true },
  { id: 'pops', title: 'Pixel Streaming POP utilisation (%)', families: ['egbe_pxstream_pop_utilisation_ratio'], by: 'pop', scale: 100 },
  { id: 'queue', title: 'Waiting room depth (people in line)', families: ['egbe_admission_queue_depth'], by: 'region', int: true },
  { id: 'drain', title: 'Waiting room drain rate (admits/min)', families: ['egbe_admission_drain_rate_per_minute'], by: 'region' },
  { id: 'turn', title: 'TURN allocations', families: ['egbe_turn_allocations'], by: 'transport', int: true },
  { id: 'turnbytes', title: 'TURN relayed (Mbit/s)', families: ['egbe_turn_relayed_bytes_total'], by: 'direction', rate: true, scale: 8 / 1e6 },
  { id: 'turnrefusals', title: 'TURN refusals by reason (per s)', families: ['egbe_turn_refusals_total'], by: 'reason', rate: true, nonzero: true },
];

const state = window.opsState = {
  polls: 0, charts: {}, errors: [], token: 'none', room: null, roomPolls: 0, sessions: null, actions: [],
};
const series = {}; // chart id -> label -> [{t, v}]
let prev = null;    // previous raw sample, for rates
const window_ = { first: Date.now(), last: Date.now() }; // the time axis: first and latest sample kept
const times = []; // the kept samples' times
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

// ---- operator token ----

let token = sessionStorage.getItem(TOKEN_KEY) || '';
let minting = null; // the one dev-token request in flight

async function ensureToken() {
  if (token) return token;
  if (state.token === 'needed') return ''; // waiting for the operator to paste one
  // Dev mode mints the page a token on its own listener; prod answers 401.
  minting ||= fetch('dev-token', { method: 'POST' }).then(async (r) => {
    if (!r.ok) return '';
    token = (await r.json()).token;
    sessionStorage.setItem(TOKEN_KEY, token);
    state.token = 'dev';
    $('who').textContent = 'dev operator';
    return token;
  }).catch(() => '').finally(() => { minting = null; });
  const t = await minting;
  if (!t) askForToken();
  return t;
}

function askForToken(why) {
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = 'needed';
  $('who').textContent = why || 'operator token needed for the room and sessions';
  $('tokenform').classList.add('shown');
}

$('tokenform').onsubmit = (ev) => {
  ev.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  token = t;
  sessionStorage.setItem(TOKEN_KEY, t);
  $('token').value = '';
  $('tokenform').classList.remove('shown');
  state.token = 'pasted';
  $('who').textContent = 'operator token set';
  refreshOperator();
};

// operatorFetch calls an operator route with the token; a 401 asks for a
// new one. It returns {status, body}.
async function operatorFetch(path, opts = {}) {
  const t = await ensureToken();
  if (!t) return { status: 401, body: { code: 'token_invalid' } };
  const r = await fetch(path, { ...opts, cache: 'no-store',
    headers: { ...(opts.headers || {}), Authorization: 'Bearer ' + t, ...(opts.body ? { 'Content-Type': 'application/json' } : {}) } });
  let body = null;
  try { body = await r.json(); } catch { body = null; }
  if (r.status === 401) {
    // A stale token (a dev edge restarted with a new secret) or a wrong
    // paste: drop it; dev mints a new one, prod asks again.
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = 'none';
    $('who').textContent = 'the operator token was refused';
  }
  return { status: r.status, body };
}

// ---- the waiting room ----

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function flag(name, on) {
  const s = el('span', name + (on ? ' ✔' : ' ✘'), 'flag' + (on ? ' on' : ''));
  s.dataset.flag = name;
  s.dataset.on = String(!!on);
  return s;
}

function drawRoom(st) {
  const box = $('room-flags');
  box.replaceChildren(
    flag('armed (global)', st.armedGlobal), flag('frozen', st.frozen), flag('halved', st.halved), flag('waitlist mode', st.waitlist),
    el('span', ' regions armed: ' + ((st.armedRegions || []).sort().join(', ') || 'none') + ' · epoch ' + st.epoch));
  if (st.surge) {
    box.append(el('div', `surge controller: leader ${st.surge.leader || '–'}, applied ${st.surge.applied || 'none'}` +
      (st.surge.ceilingPerMinute ? `, admit ceiling ${Math.round(st.surge.ceilingPerMinute)}/min` : '')));
  }
  const rates = st.rates || { regions: {} };
  const sel = $('region');
  for (const reg of Object.keys(rates.regions).sort()) {
    if (![...sel.options].some((o) => o.value === reg)) sel.append(new Option(reg, reg));
  }
  const t = $('rates');
  const head = el('tr');
  for (const [h, num] of [['region', false], ['admits/min', true], ['burst', true], ['in line', true], ['median wait', true], ['pixel streaming', false]]) head.append(el('th', h, num ? 'num' : ''));
  const rows = [head];
  const g = el('tr');
  g.append(el('td', 'global (signup ' + Math.round(rates.signupPerMinute || 0) + '/min)'), el('td', Math.round(rates.globalPerMinute || 0), 'num'),
    el('td', Math.round(rates.globalBurst || 0), 'num'), el('td', '', 'num'), el('td', '', 'num'), el('td', ''));
  rows.push(g);
  for (const [reg, r] of Object.entries(rates.regions).sort()) {
    const tr = el('tr');
    tr.dataset.region = reg;
    const armed = st.armedGlobal || (st.armedRegions || []).includes(reg);
    tr.append(el('td', reg + (armed ? ' (armed)' : '')), el('td', Math.round(r.perMinute), 'num'), el('td', Math.round(r.burst), 'num'),
      el('td', Math.round(r.depth || 0), 'num'), el('td', r.medianWaitSeconds > 0 ? Math.round(r.medianWaitSeconds) + ' s' : '–', 'num'),
      el('td', r.frozen ? 'frozen' : r.pxstreamAllowed ? 'admitted' : 'held back'));
    rows.push(tr);
  }
  t.replaceChildren(...rows);
}

async function refreshRoom() {
  const { status, body } = await operatorFetch('/api/v1/queue/state');
  if (status !== 200) {
    $('room-msg').textContent = status === 401 ? 'operator token needed' : 'room state: ' + status + ' ' + ((body && (body.code || body.error)) || '');
    return;
  }
  $('room-msg').textContent = '';
  state.room = body;
  state.roomPolls++;
  drawRoom(body);
}

async function control(op, value) {
  const body = { reason: $('reason').value || 'operator page' };
  if (op === 'arm') { body.armed = value; body.region = $('region').value; }
  if (op === 'freeze') body.frozen = value;
  if (op === 'halve') body.halved = value;
  const { status, body: out } = await operatorFetch('/api/v1/queue/' + op, { method: 'POST', body: JSON.stringify(body) });
  state.actions.push({ op, value, status });
  if (status === 200) {
    state.room = { ...state.room, ...out };
    drawRoom(state.room);
    $('room-msg').textContent = '';
  } else {
    $('room-msg').textContent = op + ': ' + status + ' ' + ((out && (out.code || out.error)) || '');
  }
}

for (const b of document.querySelectorAll('button[data-op]')) {
  b.onclick = () => control(b.dataset.op, b.dataset.value === undefined ? undefined : b.dataset.value === 'true');
}

// ---- live sessions ----

function drawSessions(list) {
  $('sessions-total').textContent = `(${list.total}${list.sessions.length < list.total ? ', first ' + list.sessions.length : ''})`;
  const head = el('tr');
  for (const h of ['session', 'subject', 'tenant', 'instance', 'shard', 'transport', '']) head.append(el('th', h));
  const rows = [head];
  for (const s of list.sessions) {
    const tr = el('tr');
    tr.dataset.session = s.session_id;
    const b = el('button', 'Revoke', 'danger');
    b.dataset.revoke = s.session_id;
    b.onclick = () => revoke(s.session_id);
    const act = el('td');
    act.append(b);
    tr.append(el('td', s.session_id), el('td', s.subject), el('td', s.tenant || ''), el('td', s.instance), el('td', s.shard), el('td', s.transport), act);
    rows.push(tr);
  }
  $('sessions').replaceChildren(...rows);
}

async function refreshSessions() {
  const { status, body } = await operatorFetch('sessions');
  if (status !== 200) { $('sessions-msg').textContent = status === 401 ? 'operator token needed' : 'sessions: ' + status; return; }
  $('sessions-msg').textContent = '';
  state.sessions = body;
  drawSessions(body);
}

async function revoke(id) {
  const { status, body } = await operatorFetch('sessions/' + encodeURIComponent(id) + '/revoke', {
    method: 'POST', body: JSON.stringify({ reason: $('reason').value || 'revoked on the operator page' }) });
  state.actions.push({ op: 'revoke', session: id, status });
  $('sessions-msg').textContent = status === 200 ? `revoked ${id} until ${body.revoked_until}` : `revoke ${id}: ${status} ${(body && body.code) || ''}`;
  refreshSessions();
}

async function refreshOperator() {
  await Promise.all([refreshRoom(), refreshSessions()]).catch((e) => state.errors.push(String(e)));
}

// ---- charts ----

function familyPoints(snap, chart) {
  const out = {};
  for (const fam of chart.families) {
    for (const s of snap.families[fam] || []) {
      if (chart.filter && !chart.filter(s.labels)) continue;
      if (chart.nonzero && !s.value) continue; // a counter that never moved: no series
      const key = chart.by === '__name__' ? fam.replace(/^egbe_sfu_|_total$/g, '') : (s.labels[chart.by] || 'all');
      const k = fam + '|' + JSON.stringify(s.labels);
      let v = s.value;
      if (chart.rate) {
        const p = prev ? prev.values[k] : undefined;
        if (p === undefined) continue; // a rate needs two samples
        v = Math.max(0, (s.value - p) / ((snap.ts - prev.ts) / 1000));
      }
      out[key] = (out[key] || 0) + v * (chart.scale || 1);
    }
  }
  return out;
}

function flatten(snap) {
  const values = {};
  for (const [fam, list] of Object.entries(snap.families)) for (const s of list) values[fam + '|' + JSON.stringify(s.labels)] = s.value;
  return { ts: snap.ts, values };
}

function ensurePanel(chart) {
  let p = $('panel-' + chart.id);
  if (p) return p;
  p = el('div', undefined, 'panel');
  p.id = 'panel-' + chart.id;
  const c = el('canvas');
  c.width = 840; c.height = 380;
  p.append(el('h2', chart.title), c, el('div', undefined, 'legend'));
  $('grid').append(p);
  return p;
}

// yScale picks four round steps covering maxV (1, 2, 2.5 or 5 times a
// power of ten): whole numbers for counts.
function yScale(maxV, int) {
  const raw = Math.max(maxV, int ? 4 : 1e-9) / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw * (1 - 1e-9));
  if (int) step = Math.max(1, Math.ceil(step));
  if (maxV <= 0 && !int) step = 0.25;
  return { max: step * 4, ticks: [0, 1, 2, 3, 4].map((i) => i * step), step };
}

// fmt shows a value: counts as whole numbers, an axis tick with the
// decimals its step has, anything else with three significant-ish digits.
function fmt(v, int, step) {
  if (int) return String(Math.round(v));
  if (step) return v.toFixed(Math.min(3, (String(+step.toFixed(6)).split('.')[1] || '').length));
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }); }

function marker(g, shape, x, y, r) {
  g.beginPath();
  switch (shape) {
    case 'square': g.rect(x - r, y - r, 2 * r, 2 * r); g.fill(); return;
    case 'triangle': g.moveTo(x, y - r); g.lineTo(x + r, y + r); g.lineTo(x - r, y + r); g.closePath(); g.fill(); return;
    case 'diamond': g.moveTo(x, y - r); g.lineTo(x + r, y); g.lineTo(x, y + r); g.lineTo(x - r, y); g.closePath(); g.fill(); return;
    case 'cross': g.moveTo(x - r, y - r); g.lineTo(x + r, y + r); g.moveTo(x + r, y - r); g.lineTo(x - r, y + r); g.stroke(); return;
    case 'plus': g.moveTo(x - r, y); g.lineTo(x + r, y); g.moveTo(x, y - r); g.lineTo(x, y + r); g.stroke(); return;
    default: g.arc(x, y, r, 0, 2 * Math.PI); g.fill();
  }
}

// style is series i's look: colour, dash and marker; no two of the first
// 36 series share both dash and marker.
function style(i) {
  const n = DASHES.length;
  return { color: COLORS[i % COLORS.length], dash: DASHES[i % n], marker: MARKERS[(i + Math.floor(i / n)) % MARKERS.length] };
}

function draw(chart) {
  const p = ensurePanel(chart);
  const canvas = p.querySelector('canvas');
  const g = canvas.getContext('2d');
  const data = series[chart.id] || {};
  const labels = Object.keys(data).sort();
  g.clearRect(0, 0, canvas.width, canvas.height);
  let maxV = 0;
  for (const l of labels) for (const pt of data[l]) maxV = Math.max(maxV, pt.v);
  // Every chart shares one time axis: the page's history, at least a minute.
  const maxT = window_.last, minT = Math.min(window_.first, maxT - 60000);
  const ys = yScale(maxV, chart.int);
  const W = canvas.width, H = canvas.height, left = 64, right = 12, top = 12, bottom = 40;
  const X = (t) => left + (W - left - right) * (t - minT) / (maxT - minT);
  const Y = (v) => top + (H - top - bottom) * (1 - v / ys.max);
  g.setLineDash([]); g.lineWidth = 1; g.strokeStyle = '#26313d'; g.fillStyle = '#7f8c99'; g.font = '20px system-ui';
  g.textAlign = 'right'; g.textBaseline = 'middle';
  const yTicks = [];
  for (const v of ys.ticks) {
    const y = Y(v);
    g.beginPath(); g.moveTo(left, y); g.lineTo(W - right, y); g.stroke();
    const s = fmt(v, chart.int, ys.step);
    yTicks.push(s);
    g.fillText(s, left - 8, y);
  }
  // Time axis: five ticks, wall-clock time of the samples.
  g.textAlign = 'center'; g.textBaseline = 'top';
  const xTicks = [];
  for (let i = 0; i <= 4; i++) {
    const t = minT + (maxT - minT) * i / 4;
    const x = X(t);
    g.beginPath(); g.moveTo(x, H - bottom); g.lineTo(x, H - bottom + 6); g.stroke();
    const s = clock(t);
    xTicks.push(s);
    g.textAlign = i === 0 ? 'left' : i === 4 ? 'right' : 'center';
    g.fillText(s, x, H - bottom + 10);
  }
  g.beginPath(); g.moveTo(left, H - bottom); g.lineTo(W - right, H - bottom); g.stroke();
  const styles = [];
  labels.forEach((l, i) => {
    const st = style(i);
    styles.push({ label: l, ...st, dash: st.dash.join(',') });
    g.strokeStyle = st.color; g.fillStyle = st.color; g.lineWidth = 3; g.setLineDash(st.dash);
    g.beginPath();
    data[l].forEach((pt, j) => { if (j === 0) g.moveTo(X(pt.t), Y(pt.v)); else g.lineTo(X(pt.t), Y(pt.v)); });
    g.stroke();
    g.setLineDash([]); g.lineWidth = 2;
    // Markers every few points, offset per series so equal lines show both.
    data[l].forEach((pt, j) => { if ((j + i) % 6 === 0 || j === data[l].length - 1) marker(g, st.marker, X(pt.t), Y(pt.v), 6); });
  });
  const legend = p.querySelector('.legend');
  if (!labels.length) {
    legend.replaceChildren(el('em', 'no data yet'));
  } else {
    legend.replaceChildren(...labels.map((l, i) => {
      const st = style(i);
      const item = el('span');
      const sw = el('canvas');
      sw.width = 52; sw.height = 20;
      const sg = sw.getContext('2d');
      sg.strokeStyle = st.color; sg.fillStyle = st.color; sg.lineWidth = 3; sg.setLineDash(st.dash);
      sg.beginPath(); sg.moveTo(0, 10); sg.lineTo(52, 10); sg.stroke(); sg.setLineDash([]); marker(sg, st.marker, 26, 10, 6);
      item.append(sw, document.createTextNode(`${l}: ${fmt(data[l].at(-1).v, chart.int)}`));
      return item;
    }));
  }
  state.charts[chart.id] = { series: labels.length, points: labels.reduce((n, l) => n + data[l].length, 0), int: !!chart.int,
    last: Object.fromEntries(labels.map((l) => [l, data[l].at(-1).v])), xTicks, yTicks, styles,
    legend: [...legend.querySelectorAll('span')].map((s) => s.textContent) };
}

async function poll() {
  try {
    const r = await fetch('metrics.json', { cache: 'no-store' });
    const snap = await r.json();
    $('scope').textContent = snap.fleet ? `fleet of ${snap.fleet.edges} edges` : 'this edge';
    window_.last = snap.ts;
    times.push(snap.ts);
    if (times.length > HISTORY) times.shift();
    window_.first = times[0];
    for (const chart of CHARTS) {
      const pts = familyPoints(snap, chart);
      const s = series[chart.id] ||= {};
      for (const [l, v] of Object.entries(pts)) {
        (s[l] ||= []).push({ t: snap.ts, v });
        if (s[l].length > HISTORY) s[l].shift();
      }
      draw(chart);
    }
    prev = flatten(snap);
    state.polls++;
    $('updated').textContent = 'updated ' + clock(snap.ts);
  } catch (e) {
    state.errors.push(String(e));
  }
  await refreshOperator();
}

for (const c of CHARTS) ensurePanel(c);
poll();
setInterval(poll, Number(params.get('interval')) || 2000);
