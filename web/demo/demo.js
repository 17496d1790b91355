// The demo client: negotiate, open the best (or a forced) transport, say
// hello, then show the session, round trip, and the agents in view.
// window.egbe exposes the state for the browser tests.
import { encode, decode, frame, FrameReader } from './pb.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const CAPABILITIES = ['deltas', 'unreliable-lane', 'world-events', 'squad-comms', 'voice', 'action-acks'];

const egbe = window.egbe = {
  state: 'idle', transport: null, sessionId: null, shardId: null, entityId: 0, rttMs: null,
  counts: {}, inView: 0, errors: [], log: [], voice: { state: 'off', inboundPackets: 0 }, resumes: 0,
  apiBase: '', // the edge the session lives on: '' is this page's origin; moveTo changes it
};

function log(...args) {
  const line = args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
  egbe.log.push(line);
  const el = $('log');
  el.textContent = (line + '\n' + el.textContent).slice(0, 8000);
}
function setState(s) { egbe.state = s; $('state').textContent = s; }
function count(kind) { egbe.counts[kind] = (egbe.counts[kind] || 0) + 1; }

async function devToken() {
  const sub = 'demo-' + Math.random().toString(36).slice(2, 10);
  const r = await fetch('/v6/dev/token', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ sub, tenant: 'tara-studio', region: DEMO_REGION, entitlement: 'free', roles: [] }),
  });
  if (!r.ok) throw new Error('dev token: HTTP ' + r.status);
  return (await r.json()).token;
}

// negotiate asks the edge which transports to try. With the access token
// the answer also carries ice_servers: TURN credentials for this user,
// which every RTCPeerConnection to the edge (data channels, voice) is
// created with, so both work from behind a NAT.
async function negotiate(token) {
  const q = new URLSearchParams();
  if (typeof WebTransport === 'undefined') q.set('quic', '0');
  if (typeof RTCPeerConnection === 'undefined') q.set('webrtc', '0');
  const r = await fetch(egbe.apiBase + '/v6/realtime/negotiate?' + q, token ? { headers: { Authorization: 'Bearer ' + token } } : {});
  const body = await r.json();
  if (!r.ok) throw new Error(body.code + ': ' + body.message);
  egbe.iceServers = (body.ice_servers && body.ice_servers.iceServers) || [];
  return body;
}

// ?forceturn=1 (a dev/test switch, as Epic's ForceTURN) allows relay
// candidates only: every WebRTC path then goes through a TURN server.
const FORCE_TURN = ['1', 'true'].includes((params.get('forceturn') || '').toLowerCase());
egbe.forceTurn = FORCE_TURN;
egbe.iceServers = [];

// rtcConfig is the RTCConfiguration of every peer connection to the edge.
egbe.rtcConfig = () => {
  if (FORCE_TURN && !egbe.iceServers.some((s) => [].concat(s.urls).some((u) => /^turns?:/.test(u)))) {
    throw new Error('forceturn: the edge handed out no TURN server');
  }
  return { iceServers: egbe.iceServers, iceTransportPolicy: FORCE_TURN ? 'relay' : 'all' };
};

// selectedCandidateType is the type (host, srflx, prflx, relay) of the
// local candidate of pc's selected ICE pair, or '' before one is.
egbe.selectedCandidateType = async (pc) => {
  if (!pc) return '';
  const stats = await pc.getStats();
  let pairId = '';
  stats.forEach((s) => { if (s.type === 'transport' && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId; });
  const pair = pairId && stats.get(pairId);
  const local = pair && stats.get(pair.localCandidateId);
  return (local && local.candidateType) || '';
};

function b64bytes(s) { return Uint8Array.from(atob(s), (c) => c.charCodeAt(0)); }

// Each opener resolves to {send(env, unreliable), close(), kind} and calls
// onMessage(envelope) for every server envelope.
async function openWebTransport(t, onMessage, onClose) {
  const opts = {};
  if (t.certificateHashes?.length) {
    opts.serverCertificateHashes = t.certificateHashes.map((h) => ({ algorithm: h.algorithm, value: b64bytes(h.value) }));
  }
  const wt = new WebTransport(t.url, opts);
  await wt.ready;
  const bidi = await wt.createBidirectionalStream();
  const writer = bidi.writable.getWriter();
  const dgw = wt.datagrams.writable.getWriter();
  const fr = new FrameReader();
  (async () => {
    const reader = bidi.readable.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const f of fr.push(value)) onMessage(decode('ServerEnvelope', f));
    }
  })().catch(() => {}).finally(onClose);
  (async () => {
    const reader = wt.datagrams.readable.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      count('datagram'); onMessage(decode('ServerEnvelope', value));
    }
  })().catch(() => {});
  wt.closed.then(onClose, onClose);
  return {
    kind: 'webtransport',
    send(env, unreliable) {
      const b = encode('ClientEnvelope', env);
      if (unreliable) dgw.write(b).catch(() => {}); else writer.write(frame(b)).catch(() => {});
    },
    close() { wt.close(); },
  };
}

async function openWebRTC(t, onMessage, onClose) {
  const pc = new RTCPeerConnection(egbe.rtcConfig());
  egbe.rtc = pc;
  const rel = pc.createDataChannel('egbe-reliable');
  const unrel = pc.createDataChannel('egbe-unreliable', { ordered: false, maxRetransmits: 0 });
  for (const dc of [rel, unrel]) {
    dc.binaryType = 'arraybuffer';
    dc.onmessage = (ev) => { if (dc === unrel) count('unreliable'); onMessage(decode('ServerEnvelope', new Uint8Array(ev.data))); };
  }
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((res) => {
    if (pc.iceGatheringState === 'complete') return res();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && res();
    setTimeout(res, 2000);
  });
  const r = await fetch(t.url, { method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
  if (!r.ok) throw new Error('webrtc offer: HTTP ' + r.status + ' ' + (await r.text()));
  await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
  await new Promise((res, rej) => {
    rel.onopen = res;
    setTimeout(() => rej(new Error('data channel did not open')), 10000);
  });
  rel.onclose = onClose;
  return {
    kind: 'webrtc',
    send(env, unreliable) {
      const b = encode('ClientEnvelope', env);
      const dc = unreliable && unrel.readyState === 'open' ? unrel : rel;
      if (dc.readyState === 'open') dc.send(b);
    },
    close() { pc.close(); onClose(); },
  };
}

// Protojson prints 64-bit integers as strings; the page wants numbers.
function numify(v) {
  if (Array.isArray(v)) return v.map(numify);
  if (v && typeof v === 'object') {
    for (const k of Object.keys(v)) v[k] = numify(v[k]);
    return v;
  }
  return typeof v === 'string' && /^-?\d+$/.test(v) && v.length < 16 ? Number(v) : v;
}

async function openWebSocket(t, onMessage, onClose) {
  const json = params.get('encoding') !== 'proto';
  const url = new URL(t.url, location.href);
  url.protocol = url.protocol.replace('http', 'ws');
  const ws = new WebSocket(url, [json ? 'egbe.v1.json' : 'egbe.v1']);
  ws.binaryType = 'arraybuffer';
  await new Promise((res, rej) => { ws.onopen = res; ws.onerror = () => rej(new Error('websocket failed')); });
  ws.onmessage = (ev) => {
    if (typeof ev.data === 'string') onMessage(numify(JSON.parse(ev.data)));
    else onMessage(decode('ServerEnvelope', new Uint8Array(ev.data)));
  };
  ws.onclose = (ev) => { log('websocket closed', ev.code, ev.reason); onClose(); };
  return {
    kind: 'websocket',
    send(env) {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(json ? JSON.stringify(env) : encode('ClientEnvelope', env));
    },
    close() { ws.close(1000); },
  };
}

const openers = { webtransport: openWebTransport, webrtc: openWebRTC, websocket: openWebSocket };

// World state: entities by sequence, so a delta applies to its base.
const states = new Map(); // sequence -> Map(id -> entity)
let latestSeq = 0;
let conn = null;
let connGen = 0; // identifies the current transport; its close callback checks it
let timers = [];

function applyState(seq, ents) {
  states.set(seq, ents);
  if (seq > latestSeq) latestSeq = seq;
  for (const s of states.keys()) if (s < latestSeq - 64) states.delete(s);
  egbe.inView = ents.size;
  $('inview').textContent = String(ents.size);
  conn?.send({ ack: { snapshotSequence: seq } }, true);
  draw(ents);
}

function onMessage(env) {
  if (env.hello) {
    count('hello');
    const h = env.hello;
    resumeAwaited = false;
    resuming = null;
    if (h.resumed) {
      egbe.resumes++;
      log('resumed session', h.sessionId, 'on shard', h.shardId);
    }
    Object.assign(egbe, { sessionId: h.sessionId, shardId: h.shardId, entityId: h.entityId || 0, resumeToken: h.resumeToken });
    $('session').textContent = h.sessionId; $('shard').textContent = h.shardId;
    $('acceptance').textContent = ['?', 'ACCEPTED', 'DEGRADED', 'REJECTED'][h.acceptance] || h.acceptance;
    if (h.acceptance === 3 || h.acceptance === 'REJECTED') { setState('rejected'); return; }
    sessionStorage.removeItem('egbe.queueTrips');
    setState('connected');
    log('hello', h);
    if (params.get('squad')) conn?.send({ voice: { joinSquad: params.get('squad') } });
  } else if (env.snapshot) {
    count('snapshot');
    const m = new Map();
    for (const e of env.snapshot.entities || []) m.set(e.id, e);
    applyState(env.snapshot.sequence || 0, m);
  } else if (env.delta) {
    count('delta');
    const d = env.delta;
    const base = d.baseSequence ? states.get(d.baseSequence) : new Map();
    if (!base) { count('delta_without_base'); return; }
    const m = new Map(base);
    for (const id of d.removedIds || []) m.delete(id);
    for (const e of d.upserts || []) m.set(e.id, e);
    applyState(d.sequence, m);
  } else if (env.pong) {
    count('pong');
    egbe.rttMs = Math.max(0, performance.now() - env.pong.clientTimeMs);
    $('rtt').textContent = egbe.rttMs.toFixed(1) + ' ms';
  } else if (env.error) {
    count('error');
    egbe.errors.push(env.error);
    log('error', env.error);
    if (egbe.state === 'hello' && !resumeAwaited && ROOM_CODES.includes(env.error.code)) {
      // The waiting room is armed (or the ticket we had lapsed): take a
      // place in line; the queue page sends us back with a ticket.
      disconnect();
      setState('queued');
      goToQueue();
      return;
    }
    if (egbe.state === 'hello' && resumeAwaited) {
      // An Error instead of a ServerHello: the resume was refused
      // (revoked, expired, the shard gone for good); do not retry.
      disconnect();
      setState('failed');
    }
  } else if (env.drain) {
    count('drain'); log('drain', env.drain);
  } else if (env.event) { count('event'); } else if (env.actionAck) { count('actionAck'); } else if (env.voice) {
    count('voice'); egbe.voice.slots = env.voice.slotEntityIds;
  }
  $('counts').textContent = JSON.stringify(egbe.counts);
}

// Opens the best (or the forced) transport the edge offers and sends the
// hello; resumeToken set means resume that session. Throws when no
// transport opens.
async function open(token, resumeToken) {
  const neg = await negotiate(token);
  egbe.fallbackChain = neg.fallbackChain;
  const forced = $('transport').value || params.get('transport');
  const candidates = neg.transports.filter((t) => !forced || t.kind === forced);
  if (!candidates.length) throw new Error('transport ' + forced + ' not offered');
  let lastErr;
  for (const t of candidates) {
    setState('opening ' + t.kind);
    const gen = ++connGen; // a failed attempt's late close callback is stale
    try {
      conn = await openers[t.kind](t, onMessage, () => transportClosed(gen));
      break;
    } catch (e) { lastErr = e; log('open', t.kind, 'failed:', String(e)); }
  }
  if (!conn) throw lastErr;
  egbe.transport = conn.kind; $('t').textContent = conn.kind;
  setState('hello');
  resumeAwaited = !!resumeToken;
  // An admission ticket from the queue page (one use: a resume needs none).
  const admissionTicket = resumeToken ? '' : sessionStorage.getItem(ADMISSION_KEY) || '';
  if (admissionTicket) {
    sessionStorage.removeItem(ADMISSION_KEY);
    egbe.admissionTicketUsed = true;
    log('presenting the admission ticket from the waiting room');
  }
  conn.send({ hello: {
    accessToken: token, instanceId: $('instance').value, authorityKind: 2, protocolVersion: 1,
    capabilities: CAPABILITIES, rendererProfile: { renderer: 1 }, ...(resumeToken ? { resumeToken } : {}),
    ...(admissionTicket ? { admissionTicket } : {}),
  } });
}

// The waiting room: a hello refused for a missing or spent ticket sends
// the page to /queue/, which comes back here once admitted, with the
// admission ticket in sessionStorage.
const ADMISSION_KEY = 'egbe.admission';
const ROOM_CODES = ['admission_ticket_required', 'admission_denied'];
const DEMO_REGION = 'gb';

function goToQueue() {
  // A ticket refused again and again (it lapsed on the way back) must not
  // bounce the page between here and the queue forever.
  const trips = Number(sessionStorage.getItem('egbe.queueTrips') || 0) + 1;
  sessionStorage.setItem('egbe.queueTrips', String(trips));
  if (trips > 3) {
    setState('failed');
    egbe.errors.push({ code: 'client', message: 'the waiting room kept refusing the admission ticket' });
    return;
  }
  const back = new URL(location.href);
  back.searchParams.set('auto', '1');
  const q = new URLSearchParams({ region: DEMO_REGION, return: back.pathname + back.search });
  if (params.get('interval')) q.set('interval', params.get('interval'));
  log('the waiting room is armed: joining the line');
  location.assign('/queue/?' + q);
}

async function connect() {
  disconnect();
  setState('negotiating');
  try {
    const token = await devToken();
    egbe.accessToken = token;
    await open(token, '');
    let seq = 0;
    const t0 = performance.now();
    timers.push(setInterval(() => conn?.send({ ping: { clientTimeMs: Math.round(performance.now()) } }), 500));
    timers.push(setInterval(() => {
      const a = (performance.now() - t0) / 8000;
      conn?.send({ presence: { seq: ++seq, position: { xMm: Math.round(Math.cos(a) * 20000), yMm: Math.round(Math.sin(a) * 20000) }, clientTimeMs: Math.round(performance.now()) } }, true);
    }, 100));
  } catch (e) {
    setState('failed');
    egbe.errors.push({ code: 'client', message: String(e) });
    log('connect failed:', String(e));
  }
}

// A transport that ends while the session is live (its edge died, or
// drained it) is resumed with the resume token through the same origin:
// behind a load balancer that is any edge of the fleet. Backoff 250 ms
// doubling to 4 s, for up to a minute; a refused resume is final, one whose
// transport ends unanswered is retried.
const RESUME_FOR_MS = 60000;
let resumeTimer = null;
let resumeAwaited = false; // a resume hello is out: an Error answering it is final
let resuming = null; // {until, delay} while resuming

function transportClosed(gen) {
  if (gen !== connGen) return; // an older or user-closed transport
  connGen++;
  conn = null;
  if (resumeAwaited && egbe.state === 'hello') {
    resumeAwaited = false; // this attempt ended unanswered: try again
    resumeSession();
    return;
  }
  if (egbe.state !== 'connected' || !egbe.resumeToken) {
    if (egbe.state === 'connected') setState('closed');
    return;
  }
  log('transport lost: resuming session', egbe.sessionId);
  startResuming();
}

function startResuming() {
  resuming = { until: Date.now() + RESUME_FOR_MS, delay: 250 };
  resumeSession();
}

function resumeSession() {
  const r = resuming;
  if (!r) return;
  if (Date.now() + r.delay > r.until) {
    resuming = null;
    setState('failed');
    egbe.errors.push({ code: 'client', message: 'could not resume the session' });
    return;
  }
  setState('resuming');
  const delay = r.delay;
  r.delay = Math.min(r.delay * 2, 4000);
  resumeTimer = setTimeout(async () => {
    resumeTimer = null;
    try {
      await open(egbe.accessToken, egbe.resumeToken);
      return; // the ServerHello (or a refusal) arrives in onMessage
    } catch (e) {
      log('resume attempt failed:', String(e));
    }
    resumeSession();
  }, delay);
}

// moveTo resumes the live session on the edge at base (an origin such as
// http://edge-b:8080) and makes that edge the page's from then on: voice
// calls it when the room is mixed there. Resolves once the session has
// resumed there.
egbe.moveTo = async (base) => {
  if (!egbe.resumeToken) throw new Error('no session to move');
  dropTransport();
  const prev = egbe.apiBase;
  egbe.apiBase = base.replace(/\/+$/, '');
  const resumes = egbe.resumes;
  try {
    await open(egbe.accessToken, egbe.resumeToken);
    const deadline = Date.now() + 10000;
    while (!(egbe.state === 'connected' && egbe.resumes > resumes)) {
      if (Date.now() > deadline || egbe.state === 'failed') throw new Error('the session did not resume at ' + base);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (e) {
    // Back to the edge it came from, resuming there as after a lost link.
    log('move to', base, 'failed:', String(e), '- resuming where it was');
    dropTransport();
    egbe.apiBase = prev;
    startResuming();
    throw e;
  }
  log('session moved to', egbe.apiBase);
};

// dropTransport closes the current transport on purpose: its close
// callback is stale from here on and arms no resume.
function dropTransport() {
  connGen++;
  conn?.close();
  conn = null;
}

function disconnect() {
  clearTimeout(resumeTimer);
  resumeTimer = null;
  resuming = null;
  for (const t of timers) clearInterval(t);
  timers = [];
  dropTransport();
}

function draw(ents) {
  const c = $('world'), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  const scale = c.width / 140000; // +-70 m around the origin
  for (const e of ents.values()) {
    const p = e.position || {};
    g.fillStyle = e.kind === 2 ? '#f5b041' : '#5dade2';
    g.beginPath();
    g.arc(c.width / 2 + (p.xMm || 0) * scale, c.height / 2 - (p.yMm || 0) * scale, e.kind === 2 ? 5 : 3, 0, 2 * Math.PI);
    g.fill();
  }
}

// The waiting room and the matchmaker send a client that takes the no-penalty
// exit to the fallback URL; by default (--fallback-url) that is this page
// with ?surface=fallback, standing in for the Tier-2 web client.
if (params.get('surface') === 'fallback') {
  const note = document.createElement('p');
  note.id = 'fallback-note';
  note.textContent = 'Tier-2 fallback: you left the line for the lower-fidelity client, with no penalty. ' +
    'This demo page stands in for it; a deployment points --fallback-url at its real Tier-2 web client.';
  note.style.cssText = 'margin:0;padding:8px 20px;background:#2b2a1a;color:#f0e3a8';
  document.querySelector('header').after(note);
}

$('connect').onclick = connect;
$('disconnect').onclick = () => { disconnect(); setState('idle'); };
$('voice').onclick = () => import('./voice.js').then((v) => v.joinVoice(egbe, log)).catch((e) => log('voice:', String(e)));
if (params.get('transport')) $('transport').value = params.get('transport');
if (params.get('auto') === '1') connect().then(() => {
  if (params.get('voice') === '1') {
    const tryJoin = () => (egbe.state === 'connected'
      ? import('./voice.js').then((v) => v.joinVoice(egbe, log)).catch((e) => { egbe.voice.error = String(e); log('voice:', String(e)); })
      : setTimeout(tryJoin, 100));
    tryJoin();
  }
});
