// The operator dashboard: polls /ops/metrics.json (the edge's Prometheus
// registry as JSON, plus the fleet's figures when the edge has Redis) and
// draws live charts. window.opsState exposes what was drawn, for the
// browser test.
const COLORS = ['#5dade2', '#f5b041', '#58d68d', '#ec7063', '#af7ac5', '#48c9b0', '#f4d03f', '#dc7633', '#85929e'];
const HISTORY = 150; // points kept per series

// Each chart: a title, the metric families it reads, how to label a series,
// and whether to plot a rate (per second) or the value.
const CHARTS = [
  { id: 'sessions', title: 'Sessions by transport', families: ['egbe_shard_sessions'], by: 'transport' },
  { id: 'handshakes', title: 'Handshakes by outcome (per s)', families: ['egbe_shard_handshakes_total'], by: 'outcome', rate: true },
  { id: 'refusals', title: 'Refusals by reason (per s)', families: ['egbe_shard_handshakes_total', 'egbe_admission_refusals_total'], by: 'reason', rate: true,
    filter: (l) => (l.outcome === undefined || l.outcome === 'rejected') && l.reason },
  { id: 'links', title: 'Shard link health (1 = up)', families: ['egbe_shard_link_up'], by: 'shard' },
  { id: 'linkrtt', title: 'Shard link RTT (ms)', families: ['egbe_shard_link_rtt_seconds'], by: 'shard', scale: 1000 },
  { id: 'sfu', title: 'SFU packets (per s)', families: ['egbe_sfu_packets_forwarded_total', 'egbe_sfu_packets_dropped_total'], by: '__name__', rate: true },
  { id: 'pops', title: 'Pixel Streaming POP utilisation (%)', families: ['egbe_pxstream_pop_utilisation_ratio'], by: 'pop', scale: 100 },
  { id: 'queue', title: 'Waiting room depth', families: ['egbe_admission_queue_depth'], by: 'region' },
  { id: 'drain', title: 'Waiting room drain rate (admits/min)', families: ['egbe_admission_drain_rate_per_minute'], by: 'region' },
  { id: 'turn', title: 'TURN allocations', families: ['egbe_turn_allocations'], by: 'transport' },
  { id: 'turnbytes', title: 'TURN relayed (Mbit/s)', families: ['egbe_turn_relayed_bytes_total'], by: 'direction', rate: true, scale: 8 / 1e6 },
  { id: 'turnrefusals', title: 'TURN refusals by reason (per s)', families: ['egbe_turn_refusals_total'], by: 'reason', rate: true, nonzero: true },
];

const state = window.opsState = { polls: 0, charts: {}, errors: [] };
const series = {}; // chart id -> label -> [{t, v}]
let prev = null;    // previous raw sample, for rates

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
  let el = document.getElementById('panel-' + chart.id);
  if (el) return el;
  el = document.createElement('div');
  el.className = 'panel'; el.id = 'panel-' + chart.id;
  el.innerHTML = `<h2>${chart.title}</h2><canvas width="840" height="340"></canvas><div class="legend"></div>`;
  document.getElementById('grid').appendChild(el);
  return el;
}

function draw(chart) {
  const el = ensurePanel(chart);
  const canvas = el.querySelector('canvas');
  const g = canvas.getContext('2d');
  const data = series[chart.id] || {};
  const labels = Object.keys(data).sort();
  g.clearRect(0, 0, canvas.width, canvas.height);
  let maxV = 1, minT = Infinity, maxT = -Infinity;
  for (const l of labels) for (const p of data[l]) { maxV = Math.max(maxV, p.v); minT = Math.min(minT, p.t); maxT = Math.max(maxT, p.t); }
  const W = canvas.width, H = canvas.height, pad = 36;
  g.strokeStyle = '#26313d'; g.fillStyle = '#7f8c99'; g.font = '20px system-ui';
  for (let i = 0; i <= 4; i++) {
    const y = pad / 2 + (H - pad) * i / 4;
    g.beginPath(); g.moveTo(pad, y); g.lineTo(W, y); g.stroke();
    g.fillText(fmt(maxV * (1 - i / 4)), 0, y + 6);
  }
  labels.forEach((l, i) => {
    g.strokeStyle = COLORS[i % COLORS.length]; g.lineWidth = 3; g.beginPath();
    data[l].forEach((p, j) => {
      const x = pad + (W - pad) * (maxT > minT ? (p.t - minT) / (maxT - minT) : 1);
      const y = pad / 2 + (H - pad) * (1 - p.v / maxV);
      if (j === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  });
  el.querySelector('.legend').innerHTML = labels.length
    ? labels.map((l, i) => `<span style="--c:${COLORS[i % COLORS.length]}">${l}: ${fmt(data[l].at(-1).v)}</span>`).join('')
    : '<em>no data yet</em>';
  state.charts[chart.id] = { series: labels.length, points: labels.reduce((n, l) => n + data[l].length, 0),
    last: Object.fromEntries(labels.map((l) => [l, data[l].at(-1).v])) };
}

function fmt(v) { return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2); }

async function poll() {
  try {
    const r = await fetch('metrics.json', { cache: 'no-store' });
    const snap = await r.json();
    document.getElementById('scope').textContent = snap.fleet ? `fleet of ${snap.fleet.edges} edges` : 'this edge';
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
    document.getElementById('updated').textContent = 'updated ' + new Date(snap.ts).toLocaleTimeString();
  } catch (e) {
    state.errors.push(String(e));
  }
}

for (const c of CHARTS) ensurePanel(c);
poll();
setInterval(poll, Number(new URLSearchParams(location.search).get('interval')) || 2000);
