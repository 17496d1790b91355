package pxsfu

import "errors"

var (
	// ErrConfig: Config.Validate refused a field.
	ErrConfig = errors.New("pxsfu: bad config")
	// ErrBadOffer: the streamer's offer is malformed (SDP that does not
	// parse, no video, a malformed simulcast description). The offer is
	// not answered; the SFU subscribes again after RetrySubscribe.
	ErrBadOffer = errors.New("pxsfu: malformed streamer offer")
	// ErrSecondOffer: a streamer offer arrived while the SFU already has a
	// streamer; it is ignored (Epic's SFU closes its socket instead).
	ErrSecondOffer = errors.New("pxsfu: the SFU already has a streamer")
	// ErrUnknownPlayer: a message names a player the SFU does not have.
	ErrUnknownPlayer = errors.New("pxsfu: unknown player")
	// ErrNoStreamer: a player arrived while the SFU has no streamer; it is
	// offered once the streamer's media is up.
	ErrNoStreamer = errors.New("pxsfu: no streamer")
	// ErrAnswerTimeout: a player did not answer its offer in time; its
	// peer connection is dropped.
	ErrAnswerTimeout = errors.New("pxsfu: player did not answer")
	// ErrBadAnswer: a player's answer was refused by WebRTC.
	ErrBadAnswer = errors.New("pxsfu: bad answer")
	// ErrFull: the SFU serves Config.MaxPlayers players already.
	ErrFull = errors.New("pxsfu: full")
	// ErrSendQueueFull: the signalling socket fell too far behind; it is
	// dropped and redialled.
	ErrSendQueueFull = errors.New("pxsfu: signalling send queue full")
	// ErrRefused: the signalling server closed the socket with a policy
	// close (bad or missing token).
	ErrRefused = errors.New("pxsfu: refused by signalling server")
)
