package redisstate

// Every Redis key and hash tag the edge uses, in one place. A Lua script
// names at least one key of its tag in KEYS and touches only keys of that
// tag, so a Redis Cluster keeps each script on one node (redis_topologies
// tests run every store on a real Cluster, where a script that strayed
// would be refused). Times in values are Unix milliseconds; which clock
// each uses is said per store.
//
// Waiting room (queue.go): tag {egbeq}; the meta hash carries the
// epoch, every other key the epoch after the tag.
//
//	{egbeq}:meta                       hash   epoch, seq, armed, armed:<region>, frozen, halved, waitlist
//	{egbeq}:<epoch>:b:global           hash   tok, ts: global admission bucket
//	{egbeq}:<epoch>:b:r:<region>       hash   tok, ts: regional bucket
//	{egbeq}:<epoch>:b:x:<name>         hash   tok, ts: plain bucket (signups)
//	{egbeq}:<epoch>:q:<region>:<lane>  zset   seq -> ticket id (FIFO; seq is the global tiebreak)
//	{egbeq}:<epoch>:adm:<region>       zset   join deadline -> admitted, unused ticket id
//	{egbeq}:<epoch>:dr:<region>        zset   admit time -> ticket id (trailing minute: drain rate)
//	{egbeq}:<epoch>:t:<ticket>         hash   region, lane, seq, st, seen, dl
//
// Admission counters (queue.go, tallies.go, kv.go):
//
//	{egbel}:<key>                      zset   holder -> deadline: concurrency leases (one tag: a multi-key acquire is one slot)
//	egbe:budget:<key>                  int    usage budget, PEXPIRE
//	egbe:tally:<key>                   hash   expiring counters (abuse signals, surge samples), PEXPIRE
//	egbe:adm:<key>                     string admission KV (KVAdmission), PEXPIRE
//
// Concert seats (seats.go): one tag per concert, so a take over every SFU
// of the concert is one script in one slot.
//
//	{egbeseat:<event>}:<sfu>           zset   holder -> seat deadline (the caller's clock), PEXPIRE to the last
//
// Realtime sessions (kv.go, revocations.go, shards.go):
//
//	egbe:pin:<session>                 string session pin (KVPins), PEXPIRE
//	{egbe-revoked}:<session>           string revocation deadline, PEXPIRE at it
//	{egbe-revoked}:notices             pub/sub channel of revoked session ids
//	{egbe-shards}:index                zset   shard id -> dead after (Redis's clock)
//	{egbe-shards}:shard:<shard>        string JSON ShardRecord, PEXPIRE
//
// The fleet's edges (members.go, voicerooms.go, board.go): tag
// {egbe-edges}, so a voice-room claim checks its holder's membership in
// the same script.
//
//	{egbe-edges}:alive                 zset   edge id -> dead after (Redis's clock): the one membership
//	{egbe-edges}:url                   hash   edge id -> base URL its clients reach it at
//	{egbe-edges}:room:<room>           string voice room -> holder edge id, PEXPIRE
//	{egbe-edges}:board:<edge>          string the edge's operator-dashboard figures (JSON), PEXPIRE
//
// Pixel Streaming fleet (streamers.go, inbox.go): the registry's tag {px}
// (scripts name {px}:ids and derive the rest); each edge's inbox is its own
// key (and slot).
//
//	{px}:ids                           zset   streamer id -> registration seq (fleet order)
//	{px}:pop:<pop>                     zset   the same per POP
//	{px}:seq                           int    registration counter
//	{px}:s:<id>                        hash   id pop codecs edge conn seq idle players sess until, PEXPIRE
//	{px}:q:<session>                   string session -> streamer id (the lease's reverse index), PEXPIRE
//	{px-in:<edge>}                     stream the edge's cross-edge inbox (MAXLEN ~), PEXPIRE

const (
	queueTag    = "{egbeq}:"
	leaseTag    = "{egbel}:"
	budgetSpace = "egbe:budget:"
	tallySpace  = "egbe:tally:"
	seatTag     = "{egbeseat:"

	// KVAdmission is the key prefix of the admission plane's KV.
	KVAdmission = "egbe:adm:"
	// KVPins is the key prefix of realtime session pins.
	KVPins = "egbe:pin:"

	revokedTag        = "{egbe-revoked}:"
	revocationChannel = revokedTag + "notices"

	shardsTag       = "{egbe-shards}:"
	shardsIndex     = shardsTag + "index"
	shardsKeyPrefix = shardsTag + "shard:"

	edgesTag   = "{egbe-edges}:"
	edgesAlive = edgesTag + "alive"
	edgesURL   = edgesTag + "url"
	roomPrefix = edgesTag + "room:"
	boardPref  = edgesTag + "board:"

	pxTag    = "{px}:"
	pxIDsKey = pxTag + "ids"
)

// revocationKey is the key of sessionID's revocation.
func revocationKey(sessionID string) string { return revokedTag + sessionID }

// inboxKey is edge's inbox stream: a tag of its own, so every edge's
// inbox may sit on another Cluster node.
func inboxKey(edge string) string { return "{px-in:" + edge + "}" }
