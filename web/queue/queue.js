// The waiting-room page: join the queue (or present the ticket kept from an
// earlier visit), poll the status, show position and a live wait estimate
// from the measured drain rate, and always offer the Tier-2 fallback as a
// no-penalty exit. window.queueState exposes what is shown, for the tests.
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const region = params.get('region') || 'us-east';
const state = window.queueState = { polls: 0, status: null, errors: [] };

async function post(path, body, token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(path, { method: 'POST', headers, body: JSON.stringify(body) });
  const out = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(out.code || ('HTTP ' + r.status));
  return out;
}

function fmtWait(s) {
  if (!s) return 'any moment now';
  if (s < 90) return `about ${s} s`;
  return `about ${Math.round(s / 60)} min`;
}

function show(st) {
  state.status = st;
  $('fallback').href = st.fallbackUrl || '/?surface=fallback';
  if (st.fallbackFirst) $('fallback').textContent = 'Recommended now: join at lower fidelity (no penalty)';
  if (st.status === 'admitted' || st.status === 'open') {
    $('title').textContent = "You're in";
    $('position').textContent = '✓';
    $('admitted').hidden = false;
    $('joinby').textContent = st.joinBy ? new Date(st.joinBy).toLocaleTimeString() : 'soon';
    $('wait').textContent = '';
    if (st.admissionTicket) sessionStorage.setItem('egbe.admission', st.admissionTicket);
    return;
  }
  $('title').textContent = st.status === 'paused' ? 'The line is paused' : "You're in line";
  $('position').textContent = st.position ? '#' + st.position : '–';
  $('wait').textContent = `${st.depth} waiting · ${st.drainPerMinute}/min getting in · wait ${fmtWait(st.estimatedWaitSeconds)}`;
}

async function main() {
  let ticket = localStorage.getItem('egbe.queueTicket');
  const token = params.get('token') || '';
  for (;;) {
    try {
      const st = ticket ? await post('/api/v1/queue/status', { ticket }) : await post('/api/v1/queue/join', { clientRegion: region }, token);
      if (st.ticket) { ticket = st.ticket; localStorage.setItem('egbe.queueTicket', ticket); }
      state.polls++;
      show(st);
      if (st.status === 'admitted' || st.status === 'open' || st.status === 'used') return;
    } catch (e) {
      state.errors.push(String(e));
      if (String(e).includes('ticket')) { localStorage.removeItem('egbe.queueTicket'); ticket = null; }
    }
    await new Promise((r) => setTimeout(r, Number(params.get('interval')) || 2000));
  }
}
main();
