// A minimal protobuf wire codec for the egbe.v1 messages the demo page
// uses. Schemas mirror codec/egbe.proto: {fieldNumber: [name, type, schema?]}
// with types: u (uint varint), s (sint zigzag varint), b (bool), str,
// bytes, msg; a trailing "*" marks a repeated field. Unknown fields are
// skipped, as protobuf requires.

export const S = {};
S.Vec3 = { 1: ['xMm', 's'], 2: ['yMm', 's'], 3: ['zMm', 's'] };
S.RendererProfile = { 1: ['renderer', 'u'], 2: ['constrained', 'b'] };
S.ClientHello = {
  1: ['accessToken', 'str'], 2: ['instanceId', 'str'], 3: ['authorityKind', 'u'], 4: ['protocolVersion', 'u'],
  5: ['capabilities', 'str*'], 6: ['resumeToken', 'str'], 7: ['admissionTicket', 'str'], 8: ['rendererProfile', 'msg', 'RendererProfile'],
};
S.PresencePacket = {
  1: ['seq', 'u'], 2: ['position', 'msg', 'Vec3'], 3: ['headingMdeg', 's'], 4: ['velocityMmS', 'msg', 'Vec3'],
  5: ['focusAgentId', 'u'], 6: ['radiusMm', 'u'], 7: ['clientTimeMs', 'u'],
};
S.Action = { 1: ['actionId', 'u'], 2: ['kind', 'str'], 3: ['targetId', 'u'], 4: ['payload', 'bytes'] };
S.ActionBatch = { 1: ['actions', 'msg*', 'Action'] };
S.SquadCommsMessage = { 1: ['squadId', 'str'], 2: ['fromSessionId', 'str'], 3: ['seq', 'u'], 4: ['text', 'str'], 5: ['payload', 'bytes'] };
S.Ack = { 1: ['snapshotSequence', 'u'] };
S.Ping = { 1: ['clientTimeMs', 'u'] };
S.VoiceControl = { 1: ['muteEntityId', 'u'], 2: ['unmuteEntityId', 'u'], 3: ['joinSquad', 'str'], 4: ['leaveSquad', 'str'] };
S.ClientEnvelope = {
  1: ['hello', 'msg', 'ClientHello'], 2: ['presence', 'msg', 'PresencePacket'], 3: ['actions', 'msg', 'ActionBatch'],
  4: ['squad', 'msg', 'SquadCommsMessage'], 5: ['ack', 'msg', 'Ack'], 6: ['ping', 'msg', 'Ping'], 7: ['voice', 'msg', 'VoiceControl'],
};
S.ServerHello = {
  1: ['sessionId', 'str'], 2: ['resumeToken', 'str'], 3: ['shardId', 'str'], 4: ['acceptance', 'u'], 5: ['droppedFeatures', 'str*'],
  6: ['fallbackChain', 'str*'], 7: ['presenceHz', 'u'], 8: ['entityId', 'u'], 9: ['transport', 'str'], 10: ['resumed', 'b'], 11: ['protocolVersion', 'u'],
};
S.EntityState = { 1: ['id', 'u'], 2: ['kind', 'u'], 3: ['position', 'msg', 'Vec3'], 4: ['headingMdeg', 's'], 5: ['activity', 'u'], 6: ['salience', 'u'] };
S.AgentStateSnapshot = { 1: ['instanceId', 'str'], 2: ['sequence', 'u'], 3: ['serverTimeMs', 'u'], 4: ['entities', 'msg*', 'EntityState'] };
S.AgentStateDelta = {
  1: ['instanceId', 'str'], 2: ['baseSequence', 'u'], 3: ['sequence', 'u'], 4: ['serverTimeMs', 'u'],
  5: ['upserts', 'msg*', 'EntityState'], 6: ['removedIds', 'u*'],
};
S.WorldEvent = { 1: ['seq', 'u'], 2: ['kind', 'str'], 3: ['entityId', 'u'], 4: ['serverTimeMs', 'u'], 5: ['payload', 'bytes'] };
S.ActionAck = { 1: ['actionId', 'u'] };
S.Pong = { 1: ['clientTimeMs', 'u'], 2: ['serverTimeMs', 'u'] };
S.Drain = { 1: ['reconnectAfterMs', 'u'], 2: ['resumeToken', 'str'] };
S.Error = { 1: ['code', 'str'], 2: ['message', 'str'], 3: ['resumeToken', 'str'] };
S.VoiceEvent = { 1: ['activeSpeakerEntityIds', 'u*'], 2: ['slotEntityIds', 'u*'] };
S.ServerEnvelope = {
  1: ['hello', 'msg', 'ServerHello'], 2: ['snapshot', 'msg', 'AgentStateSnapshot'], 3: ['delta', 'msg', 'AgentStateDelta'],
  4: ['event', 'msg', 'WorldEvent'], 5: ['squad', 'msg', 'SquadCommsMessage'], 6: ['drain', 'msg', 'Drain'], 7: ['error', 'msg', 'Error'],
  8: ['actionAck', 'msg', 'ActionAck'], 9: ['pong', 'msg', 'Pong'], 10: ['voice', 'msg', 'VoiceEvent'],
};

const utf8e = new TextEncoder();
const utf8d = new TextDecoder();

class Writer {
  constructor() { this.buf = []; }
  varint(v) {
    // Numbers up to 2^53 are exact in JS; that covers every field here.
    let n = BigInt(v);
    while (n >= 0x80n) { this.buf.push(Number(n & 0x7fn) | 0x80); n >>= 7n; }
    this.buf.push(Number(n));
  }
  tag(no, wt) { this.varint(no * 8 + wt); }
  bytes(b) { this.varint(b.length); for (const x of b) this.buf.push(x); }
}

function encodeInto(w, schemaName, obj) {
  const schema = S[schemaName];
  for (const [no, [name, type, sub]] of Object.entries(schema)) {
    let v = obj[name];
    if (v === undefined || v === null) continue;
    const repeated = type.endsWith('*');
    const base = repeated ? type.slice(0, -1) : type;
    const values = repeated ? v : [v];
    for (const x of values) {
      switch (base) {
        case 'u': if (x) { w.tag(+no, 0); w.varint(x); } break;
        case 's': if (x) { w.tag(+no, 0); w.varint(x >= 0 ? 2 * x : -2 * x - 1); } break;
        case 'b': if (x) { w.tag(+no, 0); w.varint(1); } break;
        case 'str': if (x !== '' || repeated) { w.tag(+no, 2); w.bytes(utf8e.encode(x)); } break;
        case 'bytes': w.tag(+no, 2); w.bytes(x); break;
        case 'msg': { const inner = new Writer(); encodeInto(inner, sub, x); w.tag(+no, 2); w.bytes(inner.buf); break; }
      }
    }
  }
}

export function encode(schemaName, obj) {
  const w = new Writer();
  encodeInto(w, schemaName, obj);
  return new Uint8Array(w.buf);
}

function readVarint(b, pos) {
  let result = 0n, shift = 0n;
  for (;;) {
    if (pos.i >= b.length) throw new Error('truncated varint');
    const x = b[pos.i++];
    result |= BigInt(x & 0x7f) << shift;
    if (!(x & 0x80)) break;
    shift += 7n;
    if (shift > 63n) throw new Error('varint overflow');
  }
  return result;
}

export function decode(schemaName, b, start = 0, end = b.length) {
  const schema = S[schemaName];
  const out = {};
  const pos = { i: start };
  while (pos.i < end) {
    const key = Number(readVarint(b, pos));
    const no = key >>> 3, wt = key & 7;
    const f = schema[no];
    if (wt === 0) {
      const v = readVarint(b, pos);
      if (!f) continue;
      const [name, type] = f;
      const base = type.replace('*', '');
      let x = base === 's' ? Number((v >> 1n) ^ -(v & 1n)) : base === 'b' ? v !== 0n : Number(v);
      if (type.endsWith('*')) (out[name] ||= []).push(x); else out[name] = x;
    } else if (wt === 2) {
      const len = Number(readVarint(b, pos));
      const s = pos.i, e = pos.i + len;
      if (e > end) throw new Error('truncated field');
      pos.i = e;
      if (!f) continue;
      const [name, type, sub] = f;
      const base = type.replace('*', '');
      let x;
      if (base === 'str') x = utf8d.decode(b.subarray(s, e));
      else if (base === 'bytes') x = b.slice(s, e);
      else if (base === 'msg') x = decode(sub, b, s, e);
      else if (base === 'u' || base === 's') { // packed repeated
        const p = { i: s }; const arr = out[name] ||= [];
        while (p.i < e) { const v = readVarint(b, p); arr.push(base === 's' ? Number((v >> 1n) ^ -(v & 1n)) : Number(v)); }
        continue;
      }
      if (type.endsWith('*')) (out[name] ||= []).push(x); else out[name] = x;
    } else if (wt === 5) { pos.i += 4; } else if (wt === 1) { pos.i += 8; } else throw new Error('bad wire type ' + wt);
  }
  return out;
}

// Stream framing (codec/framing.go): uvarint length, then the envelope.
export function frame(payload) {
  const w = new Writer();
  w.bytes(payload);
  return new Uint8Array(w.buf);
}

export class FrameReader {
  constructor() { this.buf = new Uint8Array(0); }
  push(chunk) {
    const merged = new Uint8Array(this.buf.length + chunk.length);
    merged.set(this.buf); merged.set(chunk, this.buf.length);
    this.buf = merged;
    const frames = [];
    for (;;) {
      const pos = { i: 0 };
      let len;
      try { len = Number(readVarint(this.buf, pos)); } catch { break; }
      if (this.buf.length - pos.i < len) break;
      frames.push(this.buf.slice(pos.i, pos.i + len));
      this.buf = this.buf.slice(pos.i + len);
    }
    return frames;
  }
}
