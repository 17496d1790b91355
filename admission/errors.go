package admission

import "errors"

var (
	// ErrPolicy: the policy file does not parse strictly or fails Validate.
	ErrPolicy = errors.New("admission: invalid policy")
	// ErrBadRequest: a request failed validation (see FieldError).
	ErrBadRequest = errors.New("admission: bad request")
	// ErrAudit: a denial could not be written to the audit log; the denial
	// stands.
	ErrAudit = errors.New("admission: audit write failed")
	// ErrRoomLost: the waiting room's shared state is lost; it fails closed
	// until an operator re-arms it.
	ErrRoomLost = errors.New("admission: waiting-room state lost")
	// ErrOverflow: the queue is deeper than the policy's overflow depth;
	// the caller is sent to waitlist capture instead of a wait we cannot
	// honour.
	ErrOverflow = errors.New("admission: waiting room overflow")
	// ErrStateUnavailable: shared state could not be reached; fail closed.
	ErrStateUnavailable = errors.New("admission: shared state unavailable")
	// ErrTicketRequired: the room is armed for the caller's region and the
	// request carries no admission ticket (and rides no bypass lane).
	ErrTicketRequired = errors.New("admission: waiting room armed: admission ticket required")
	// ErrEvents: the events file does not parse strictly or fails Validate.
	ErrEvents = errors.New("admission: invalid events file")
	// ErrWaitlistMode: the surge controller switched overflow to waitlist
	// mode (median wait above an hour): joins get waitlist capture.
	ErrWaitlistMode = errors.New("admission: waiting room in waitlist mode")
)

// FieldError names the request field that failed validation; handlers
// answer it as 400 {"error":"invalid_request","field":...}.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return "admission: field " + e.Field + ": " + e.Message }

// Is makes errors.Is(err, ErrBadRequest) hold for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrBadRequest }
