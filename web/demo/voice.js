// Voice for the demo page: one RTCPeerConnection to the edge's SFU, the
// microphone on a sendrecv audio m-line (slot 0) plus recvonly slots, every
// slot played through an <audio> element. egbe.voice exposes the state and
// inbound audio packet counts for the browser tests.
const SLOTS = 4;

export async function joinVoice(egbe, log, moved = false) {
  if (!egbe.sessionId) throw new Error('connect a realtime session first');
  if (egbe.voice.pc) return;
  egbe.voice.state = 'joining';
  const pc = new RTCPeerConnection(egbe.rtcConfig()); // the negotiate answer's ICE servers (TURN)
  egbe.voice.pc = pc;
  const mic = await navigator.mediaDevices.getUserMedia({ audio: true });
  pc.addTrack(mic.getAudioTracks()[0], mic);
  for (let i = 1; i < SLOTS; i++) pc.addTransceiver('audio', { direction: 'recvonly' });
  pc.ontrack = (e) => {
    const a = new Audio();
    a.autoplay = true;
    a.srcObject = new MediaStream([e.track]);
    a.play().catch(() => {});
    document.body.appendChild(a);
  };
  await pc.setLocalDescription(await pc.createOffer());
  await new Promise((res) => {
    if (pc.iceGatheringState === 'complete') return res();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && res();
    setTimeout(res, 2000);
  });
  const r = await fetch(egbe.apiBase + '/v6/voice/session', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + egbe.accessToken },
    body: JSON.stringify({ session_id: egbe.sessionId, sdp: pc.localDescription.sdp }),
  });
  const body = await r.json();
  if (!r.ok) {
    pc.close();
    egbe.voice.pc = null;
    if (body.code === 'voice_room_elsewhere' && !moved) {
      // In a fleet the room is mixed on one edge: resume the realtime
      // session there (same session id; the hello re-sends the squad) and
      // join on that edge (README, "Voice in a fleet").
      egbe.voice.state = 'moving';
      egbe.voice.edgeUrl = body.edge_url;
      document.getElementById('voicestate').textContent = 'moving to ' + body.edge_url + ', where this room\'s voice runs';
      log('voice room lives on', body.edge_id, body.edge_url, '- moving there');
      await egbe.moveTo(body.edge_url);
      return joinVoice(egbe, log, true);
    }
    egbe.voice.state = 'failed';
    throw new Error(`voice join: ${body.code}: ${body.message}`);
  }
  egbe.voice.peerId = body.voice_peer_id;
  // Fresh credentials for the next connection to this edge.
  if (body.ice_servers && body.ice_servers.iceServers) egbe.iceServers = egbe.voice.iceServers = body.ice_servers.iceServers;
  await pc.setRemoteDescription({ type: 'answer', sdp: body.sdp });
  egbe.voice.state = 'joined';
  document.getElementById('voicestate').textContent = 'joined (' + body.voice_peer_id + ')';
  log('voice joined', body.voice_peer_id);
  setInterval(async () => {
    let packets = 0;
    (await pc.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'audio') packets += s.packetsReceived || 0; });
    egbe.voice.inboundPackets = packets;
    document.getElementById('voicestate').textContent = `joined, ${packets} audio packets in`;
  }, 500);
}
