// The edge's player page: Epic's stock Pixel Streaming player
// (@epicgames-ps/lib-pixelstreamingfrontend-ui-ue5.5 over
// @epicgames-ps/lib-pixelstreamingfrontend-ue5.5), wired as Epic's own
// player.html wires it (Config with useUrlParams, so Epic's URL parameters
// work: ss, StreamerId, ForceTURN, AutoConnect, ...), plus what this edge
// adds:
//
//  - drop-in mode (--pxstream-auth none): straight to the player signalling
//    (same host, /v6/pxstream/signalling under /pxstream/, any path on the
//    player port);
//  - token mode: first a match (POST /api/v6/pxstream/match) with an access
//    token (dev: the page gets one from POST /v6/dev/token; prod: the
//    embedding page passes it in the fragment, /pxstream/#access_token=...,
//    which never reaches a server log), then the leased streamer;
//  - with several streamers listed and none asked for, the first is
//    subscribed instead of a black screen;
//  - the edge's config message carries the session's TURN credentials;
//    ICE servers from the match response's ice_servers, or (dev mode only:
//    a link must not steer a player to someone else's relay) the iceServers
//    URL parameter (JSON), are added to the config message's
//    peerConnectionOptions unless they are there already.
//
// The edge fills <meta name="egbe-pxstream"> with {auth, dev, signalling,
// match, devToken}. window.egbePlayer exposes what happened, for the
// browser tests. Regenerate the bundle with scripts/build-player.sh.
import {
  Config,
  Flags,
  Logger,
  LogLevel,
  OptionParameters,
  PixelStreaming,
} from '@epicgames-ps/lib-pixelstreamingfrontend-ue5.5';
import { Application, PixelStreamingApplicationStyle } from '@epicgames-ps/lib-pixelstreamingfrontend-ui-ue5.5';

const state = (window.egbePlayer = {
  mode: '', match: null, streamers: [], picked: '', events: {}, framesReceived: 0, localCandidateType: '',
  iceServersAdded: 0, errors: [],
});

function pageSettings() {
  const el = document.querySelector('meta[name="egbe-pxstream"]');
  try {
    return JSON.parse(el ? el.content : '{}');
  } catch (e) {
    return {};
  }
}

// Epic's URL parameters are case-insensitive.
const query = new URLSearchParams(location.search);
function param(name) {
  for (const [k, v] of query) if (k.toLowerCase() === name.toLowerCase()) return v;
  return null;
}

function wsBase() {
  return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host;
}

function fail(message) {
  state.errors.push(message);
  const box = document.createElement('div');
  box.id = 'egbe-error';
  box.textContent = message;
  box.style.cssText = 'position:fixed;top:0;left:0;right:0;padding:12px;background:#8b1e1e;color:#fff;font:14px sans-serif;z-index:100';
  document.body.appendChild(box);
}

// accessToken: the embedding page's token (the URL fragment), else a dev
// token when the edge offers them.
async function accessToken(settings) {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get('access_token')) return hash.get('access_token');
  if (settings.dev && settings.devToken) {
    const sub = 'pxstream-viewer-' + Math.random().toString(36).slice(2, 10);
    const r = await fetch(settings.devToken, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ sub, entitlement: 'paid', roles: [] }),
    });
    if (!r.ok) throw new Error('dev token: HTTP ' + r.status);
    return (await r.json()).token;
  }
  throw new Error('this edge needs an access token: open the page as /pxstream/#access_token=<token>');
}

function browserCodecs() {
  const caps = (window.RTCRtpReceiver && RTCRtpReceiver.getCapabilities && RTCRtpReceiver.getCapabilities('video')) || { codecs: [] };
  const have = new Set(caps.codecs.map((c) => c.mimeType.toLowerCase()));
  const out = ['H264', 'AV1', 'VP8'].filter((c) => have.has('video/' + c.toLowerCase()));
  return out.length ? out : ['H264'];
}

async function match(settings) {
  const token = await accessToken(settings);
  const body = { codecs: browserCodecs() };
  const region = param('region') || (settings.dev ? 'us-east' : '');
  if (region) body.client_region = region;
  const r = await fetch(settings.match, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + token },
    body: JSON.stringify(body),
  });
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = new Error(`no stream: ${answer.reason || r.status}${answer.message ? ' (' + answer.message + ')' : ''}`);
    e.fallback = answer.fallback_url;
    throw e;
  }
  return answer;
}

function extraIceServers(m, settings) {
  const out = [];
  if (m && m.ice_servers && Array.isArray(m.ice_servers.iceServers)) out.push(...m.ice_servers.iceServers);
  const p = param('iceServers');
  if (p && !settings.dev) {
    state.errors.push('the iceServers parameter is honoured in dev mode only');
  } else if (p) {
    try {
      const v = JSON.parse(p);
      out.push(...(Array.isArray(v) ? v : v.iceServers || []));
    } catch (e) {
      state.errors.push('iceServers parameter is not JSON: ' + e.message);
    }
  }
  return out;
}

async function main() {
  const settings = pageSettings();
  const initial = { AutoConnect: true, AutoPlayVideo: true, StartVideoMuted: true };
  let m = null;
  if (param('ss')) {
    state.mode = 'url';
  } else if (settings.auth === 'token') {
    state.mode = 'token';
    try {
      m = state.match = await match(settings);
    } catch (e) {
      fail(e.message + (e.fallback ? ' — ' + e.fallback : ''));
      return;
    }
    initial.ss = m.signalling_url;
    if (!param('StreamerId')) initial.StreamerId = m.streamer_id;
  } else {
    state.mode = 'drop-in';
    initial.ss = settings.signalling ? wsBase() + settings.signalling : wsBase();
  }

  const style = new PixelStreamingApplicationStyle();
  style.applyStyleSheet();
  Logger.InitLogging(LogLevel.Warning, true);
  const config = new Config({ useUrlParams: true, initialSettings: initial });
  const stream = new PixelStreaming(config);

  // Before the first message arrives (connecting is asynchronous): add our
  // ICE servers to the config message the library starts its session with.
  // The edge's config message carries the session's TURN credentials
  // itself (the same as the match answer's, usually): a server already
  // there is not added twice (it would allocate twice).
  const ice = extraIceServers(m, settings);
  if (ice.length) {
    const key = (s) => JSON.stringify([[].concat(s.urls), s.username || '', s.credential || '']);
    stream.signallingProtocol.transport.addListener('message', (msg) => {
      if (msg && msg.type === 'config') {
        msg.peerConnectionOptions = msg.peerConnectionOptions || {};
        const have = msg.peerConnectionOptions.iceServers || [];
        const seen = new Set(have.map(key));
        const add = ice.filter((s) => !seen.has(key(s)));
        msg.peerConnectionOptions.iceServers = [...have, ...add];
        state.iceServersAdded = add.length;
      }
    });
  }

  // Several streamers and none asked for: Epic's library waits for a
  // choice in its settings panel; pick the first.
  stream.addEventListener('streamerListMessage', (e) => {
    const { messageStreamerList, autoSelectedStreamerId, wantedStreamerId } = e.data;
    const ids = messageStreamerList.ids || [];
    state.streamers = ids;
    if (autoSelectedStreamerId) {
      state.picked = autoSelectedStreamerId;
    } else if (ids.length > 1 && (!wantedStreamerId || !config.isFlagEnabled(Flags.WaitForStreamer))) {
      state.picked = ids[0];
      config.setOptionSettingValue(OptionParameters.StreamerId, ids[0]);
    }
  });
  for (const name of ['webRtcConnecting', 'webRtcConnected', 'videoInitialized', 'playStream', 'webRtcFailed',
    'webRtcDisconnected', 'playStreamRejected']) {
    stream.addEventListener(name, () => { state.events[name] = (state.events[name] || 0) + 1; });
  }
  stream.addEventListener('subscribeFailed', (e) => state.errors.push('subscribeFailed: ' + e.data.message));
  stream.addEventListener('statsReceived', (e) => {
    const s = e.data.aggregatedStats;
    state.framesReceived = (s.inboundVideoStats && s.inboundVideoStats.framesReceived) || 0;
    const pair = s.getActiveCandidatePair && s.getActiveCandidatePair();
    if (pair) {
      const local = (s.localCandidates || []).find((c) => c.id === pair.localCandidateId);
      if (local) state.localCandidateType = local.candidateType;
    }
  });

  const application = new Application({
    stream,
    onColorModeChanged: (isLightMode) => style.setColorMode(isLightMode),
  });
  document.body.appendChild(application.rootElement);
  window.pixelStreaming = stream;
}

main().catch((e) => fail(String(e && e.message ? e.message : e)));
