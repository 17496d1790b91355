// Browser-test page: Epic's own Pixel Streaming frontend library
// (@epicgames-ps/lib-pixelstreamingfrontend-ue5.5@1.3.0), bundled at test
// time by esbuild. ?ss=<signalling url>[&streamer=<id>]. What the frontend
// reports is gathered in window.epic for the playwright driver (run.mjs).
import { Config, Logger, PixelStreaming } from '@epicgames-ps/lib-pixelstreamingfrontend-ue5.5';

const q = new URLSearchParams(location.search);
const settings = {
  ss: q.get('ss'),
  AutoConnect: true,
  AutoPlayVideo: true,
  StartVideoMuted: true,
  WaitForStreamer: true,
};
if (q.get('streamer')) settings.StreamerId = q.get('streamer');
Logger.InitLogging?.(1, false);

const epic = (window.epic = {
  events: {}, at: {}, framesReceived: 0, framesDecoded: 0, stats: 0, subscribeFailed: null, errors: [], closes: [],
  frameWidth: 0, responses: [],
});
// Record every WebSocket close the library sees (the signalling socket):
// the page observes the library, it does not change it.
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener('close', (e) => epic.closes.push({ code: e.code, reason: e.reason }));
  }
};
const config = new Config({ useUrlParams: false, initialSettings: settings });
const ps = new PixelStreaming(config, { videoElementParent: document.getElementById('player') });
for (const name of ['webRtcConnecting', 'webRtcConnected', 'webRtcSdp', 'videoInitialized', 'playStream',
  'dataChannelOpen', 'webRtcFailed', 'webRtcDisconnected', 'streamLoading', 'playStreamRejected']) {
  ps.addEventListener(name, () => {
    epic.events[name] = (epic.events[name] || 0) + 1;
    epic.at[name] ??= Math.round(performance.now());
  });
}
ps.addEventListener('subscribeFailed', (e) => { epic.subscribeFailed = e.data.message; });
ps.addEventListener('statsReceived', (e) => {
  const v = e.data.aggregatedStats.inboundVideoStats || {};
  epic.stats++;
  epic.framesReceived = v.framesReceived || 0;
  epic.framesDecoded = v.framesDecoded || 0;
  const codecs = e.data.aggregatedStats.codecs;
  if (codecs && codecs.values) epic.codec = [...codecs.values()].map((c) => c.mimeType).join(' ');
  if (epic.framesReceived > 0) epic.at.framesReceived ??= Math.round(performance.now());
  epic.frameWidth = v.frameWidth || 0;
});
// Through an SFU: the stream's Preferred Quality (Low, Medium, High) sends
// layerPreference; input goes out as UIInteraction; Response messages the
// streamer sends back are collected.
ps.addResponseEventListener('egbe-test', (r) => epic.responses.push(String(r)));
window.setQuality = (q) => ps.config.setOptionSettingValue('PreferredQuality', q);
window.sendInput = (text) => ps.emitUIInteraction(text);
window.addEventListener('error', (e) => epic.errors.push(String(e.message)));
