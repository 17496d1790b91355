// The waiting-room page: join the queue (or present the ticket kept from an
// earlier visit), poll the status, show position and a live wait estimate
// from the measured drain rate, and always offer the Tier-2 fallback as a
// no-penalty exit. Admitted, it keeps the admission ticket for the page
// that sent it here (?return=...) and goes back there. Paused and lost
// places are shown as they are. window.queueState exposes what is shown,
// for the tests.
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const region = params.get('region') || 'us-east';
const TICKET_KEY = 'egbe.queueTicket';
const ADMISSION_KEY = 'egbe.admission';
const state = window.queueState = { polls: 0, status: null, errors: [], shown: null, stopped: false };

// The page to go back to: only a path on this origin.
const back = (() => {
  const r = params.get('return') || '';
  return r.startsWith('/') && !r.startsWith('//') ? r : '/';
})();

class HTTPError extends Error {
  constructor(status, body) { super(body.code || body.error || ('HTTP ' + status)); this.status = status; this.body = body; }
}

async function post(path, body, token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(path, { method: 'POST', headers, body: JSON.stringify(body) });
  const out = await r.json().catch(() => ({}));
  if (!r.ok) throw new HTTPError(r.status, out);
  return out;
}

function fmtWait(s) {
  if (s < 0) return 'no estimate while nobody is getting in';
  if (!s) return 'any moment now';
  if (s < 90) return `about ${s} s`;
  return `about ${Math.round(s / 60)} min`;
}

function view(shown, title, big, wait, note) {
  state.shown = shown;
  $('title').textContent = title;
  $('position').textContent = big;
  $('wait').textContent = wait;
  $('note').textContent = note || '';
}

function enter(st) {
  $('admitted').hidden = false;
  $('enter').href = back;
  $('rejoin').hidden = true;
  localStorage.removeItem(TICKET_KEY); // the place is used up
  if (st.admissionTicket) sessionStorage.setItem(ADMISSION_KEY, st.admissionTicket);
  if (params.get('return')) location.assign(back);
}

function show(st) {
  state.status = st;
  $('fallback').href = st.fallbackUrl || '/?surface=fallback';
  if (st.fallbackFirst) $('fallback').textContent = 'Recommended now: join at lower fidelity (no penalty)';
  $('admitted').hidden = true;
  switch (st.status) {
    case 'open':
    case 'bypass':
      view('open', 'No line right now', '✓', '', 'Go straight in.');
      $('held').textContent = '';
      enter(st);
      return true;
    case 'admitted':
      view('admitted', "You're in", '✓', '');
      $('held').textContent = st.joinBy ? `Your place is held until ${new Date(st.joinBy).toLocaleTimeString()}.` : '';
      enter(st);
      return true;
    case 'used':
      view('used', 'Your admission was used', '✓', '', 'Join the line again to come back in.');
      showRejoin();
      return true;
    case 'gone':
      view('gone', 'You lost your place', '–', '', 'Places are kept 15 minutes without this page open, or until you leave the line.');
      showRejoin();
      return true;
    case 'paused':
      view('paused', 'The line is paused', st.position ? '#' + st.position : '–',
        `${st.depth} waiting · nobody is getting in right now`, 'You keep your place; it moves again when the pause ends.');
      return false;
    default:
      view('queued', "You're in line", st.position ? '#' + st.position : '–',
        `${st.depth} waiting · ${st.drainPerMinute}/min getting in · wait ${fmtWait(st.estimatedWaitSeconds)}`);
      return false;
  }
}

function showRejoin() {
  localStorage.removeItem(TICKET_KEY);
  $('rejoin').hidden = false;
}

function capture(body) {
  // Waitlist capture: the room cannot honour a wait (overflow, waitlist
  // mode, or its state was lost and it fails closed).
  view('waitlist', 'We cannot give you a place right now', '–', '',
    'The line is closed to new places. Try again later, or join now at lower fidelity.');
  state.capture = body;
  showRejoin();
}

let timer = null;

async function poll() {
  let ticket = localStorage.getItem(TICKET_KEY);
  const token = params.get('token') || '';
  try {
    const st = ticket ? await post('/api/v1/queue/status', { ticket }) : await post('/api/v1/queue/join', { clientRegion: region }, token);
    if (st.ticket) localStorage.setItem(TICKET_KEY, st.ticket);
    state.polls++;
    if (show(st)) { state.stopped = true; return; }
  } catch (e) {
    state.errors.push(String(e.message || e));
    if (e.status === 503 && e.body && e.body.tier === 'regional-waitlist') { capture(e.body); state.stopped = true; return; }
    if (e.status === 400 && ticket) localStorage.removeItem(TICKET_KEY); // forged, expired or of a previous epoch: join afresh
  }
  timer = setTimeout(poll, Number(params.get('interval')) || 2000);
}

$('rejoin').onclick = () => {
  $('rejoin').hidden = true;
  state.stopped = false;
  clearTimeout(timer);
  poll();
};
poll();
