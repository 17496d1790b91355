package codec

// Real sample envelopes: the golden files, the round-trip tests and the
// fuzz seeds all start from these.

type namedClient struct {
	name string
	env  *ClientEnvelope
}

type namedServer struct {
	name string
	env  *ServerEnvelope
}

func sampleEntities() []Entity {
	return []Entity{
		{ID: 7, Kind: EntityKind_AGENT, X: 1200, Y: -3400, Z: 15, HeadingMdeg: 90000, Activity: 3, Salience: 40},
		{ID: 42, Kind: EntityKind_PLAYER, X: -500, Y: 800, HeadingMdeg: -45000, Activity: 1},
		{ID: 1001, Kind: EntityKind_AGENT, X: 0, Y: 0, Z: 0, Salience: 900},
	}
}

func sampleClient() []namedClient {
	return []namedClient{
		{"client_hello", &ClientEnvelope{Msg: &ClientEnvelope_Hello{Hello: &ClientHello{
			AccessToken:     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1LTEifQ.sig",
			InstanceId:      "orun-grove-1",
			AuthorityKind:   AuthorityKind_TIER2_FALLBACK,
			ProtocolVersion: ProtocolVersion,
			Capabilities:    []string{"deltas", "world-events", "squad-comms"},
			RendererProfile: &RendererProfile{Renderer: Renderer_WEBGL2, Constrained: true},
		}}}},
		{"client_hello_resume", &ClientEnvelope{Msg: &ClientEnvelope_Hello{Hello: &ClientHello{
			AccessToken:     "tok",
			InstanceId:      "orun-grove-1",
			AuthorityKind:   AuthorityKind_UE_CLIENT,
			ProtocolVersion: ProtocolVersion,
			Capabilities:    []string{"deltas", "unreliable-lane", "world-events", "squad-comms", "voice", "action-acks"},
			ResumeToken:     "resume-abc",
			AdmissionTicket: "ticket-xyz",
		}}}},
		{"client_presence", &ClientEnvelope{Msg: &ClientEnvelope_Presence{Presence: &PresencePacket{
			Seq:          981,
			Position:     &Vec3{XMm: 12000, YMm: -4500, ZMm: 30},
			HeadingMdeg:  -120000,
			VelocityMmS:  &Vec3{XMm: 1400},
			FocusAgentId: 7,
			RadiusMm:     40000,
			ClientTimeMs: 1764690000123,
		}}}},
		{"client_actions", &ClientEnvelope{Msg: &ClientEnvelope_Actions{Actions: &ActionBatch{Actions: []*Action{
			{ActionId: 1, Kind: "greet", TargetId: 7},
			{ActionId: 2, Kind: "give", TargetId: 7, Payload: []byte{0x01, 0xff}},
		}}}}},
		{"client_squad", &ClientEnvelope{Msg: &ClientEnvelope_Squad{Squad: &SquadCommsMessage{
			SquadId: "sq-9", Seq: 3, Text: "regroup at the well",
		}}}},
		{"client_ack", &ClientEnvelope{Msg: &ClientEnvelope_Ack{Ack: &Ack{SnapshotSequence: 4410}}}},
		{"client_ping", &ClientEnvelope{Msg: &ClientEnvelope_Ping{Ping: &Ping{ClientTimeMs: 1764690000456}}}},
		{"client_voice_mute", &ClientEnvelope{Msg: &ClientEnvelope_Voice{Voice: &VoiceControl{Op: &VoiceControl_MuteEntityId{MuteEntityId: 42}}}}},
	}
}

func sampleServer() []namedServer {
	ents := sampleEntities()
	snap := &AgentStateSnapshot{InstanceId: "orun-grove-1", Sequence: 4410, ServerTimeMs: 1764690000500}
	for _, e := range ents {
		snap.Entities = append(snap.Entities, EntityToProto(e))
	}
	return []namedServer{
		{"server_hello", &ServerEnvelope{Msg: &ServerEnvelope_Hello{Hello: &ServerHello{
			SessionId:       "s-01JD",
			ResumeToken:     "resume-abc",
			ShardId:         "shard-a",
			Acceptance:      Acceptance_DEGRADED,
			DroppedFeatures: []string{"action-acks", "unreliable-lane", "voice"},
			FallbackChain:   []string{"webtransport", "webrtc", "websocket"},
			PresenceHz:      GroundReplicationHz,
			EntityId:        42,
			Transport:       "websocket",
			ProtocolVersion: ProtocolVersion,
		}}}},
		{"server_snapshot", &ServerEnvelope{Msg: &ServerEnvelope_Snapshot{Snapshot: snap}}},
		{"server_delta", &ServerEnvelope{Msg: &ServerEnvelope_Delta{Delta: &AgentStateDelta{
			InstanceId:   "orun-grove-1",
			BaseSequence: 4410,
			Sequence:     4411,
			ServerTimeMs: 1764690000550,
			Upserts:      []*EntityState{EntityToProto(Entity{ID: 7, Kind: EntityKind_AGENT, X: 1270, Y: -3400, Z: 15, HeadingMdeg: 90000, Activity: 3, Salience: 40})},
			RemovedIds:   []uint32{42, 300},
		}}}},
		{"server_event", &ServerEnvelope{Msg: &ServerEnvelope_Event{Event: &WorldEvent{
			Seq: 12, Kind: "agent.spoke", EntityId: 7, ServerTimeMs: 1764690000600, Payload: []byte("hello"),
		}}}},
		{"server_action_ack", &ServerEnvelope{Msg: &ServerEnvelope_ActionAck{ActionAck: &ActionAck{ActionId: 2}}}},
		{"server_pong", &ServerEnvelope{Msg: &ServerEnvelope_Pong{Pong: &Pong{ClientTimeMs: 1764690000456, ServerTimeMs: 1764690000470}}}},
		{"server_drain", &ServerEnvelope{Msg: &ServerEnvelope_Drain{Drain: &Drain{ReconnectAfterMs: 2500, ResumeToken: "resume-abc"}}}},
		{"server_error", &ServerEnvelope{Msg: &ServerEnvelope_Error{Error: &Error{Code: string(CodeUnsupportedVersion), Message: "protocol version 2 unsupported"}}}},
		{"server_voice", &ServerEnvelope{Msg: &ServerEnvelope_Voice{Voice: &VoiceEvent{ActiveSpeakerEntityIds: []uint32{42}, SlotEntityIds: []uint32{42, 0, 0, 0}}}}},
	}
}
