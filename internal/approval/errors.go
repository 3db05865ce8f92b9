package approval

import "errors"

// Sentinel errors. Every failure this package reports wraps exactly the sentinels that describe it, so callers
// decide with errors.Is and never by reading messages. Token verification and the store share the sentinels
// that mean the same thing (ErrExpired, ErrWrongTool, ErrParamsMismatch, ...).
var (
	// ErrMalformed: the token is not a well-formed approval token (bad encoding, missing claims, wrong type).
	ErrMalformed = errors.New("malformed approval token")
	// ErrBadSignature: the signature does not verify with the key its "kid" names, or the token is not signed
	// with EdDSA (alg "none", HS256 and every other algorithm are refused).
	ErrBadSignature = errors.New("approval token signature is invalid")
	// ErrUnknownKey: the token names a key ID that is not in the trusted key set.
	ErrUnknownKey = errors.New("approval token signed by an unknown key")
	// ErrExpired: the token, the grant or the request is past its expiry.
	ErrExpired = errors.New("approval expired")
	// ErrNotYetValid: the token's nbf or iat lies in the future (beyond the allowed clock skew).
	ErrNotYetValid = errors.New("approval token not yet valid")
	// ErrWrongAudience: the token is addressed to another cluster.
	ErrWrongAudience = errors.New("approval token is for another audience")
	// ErrWrongTool: the approval is for another tool.
	ErrWrongTool = errors.New("approval is for another tool")
	// ErrParamsMismatch: the approval is for other parameters.
	ErrParamsMismatch = errors.New("approval is for other parameters")
	// ErrWrongNamespace: the approval is for another target namespace.
	ErrWrongNamespace = errors.New("approval is for another namespace")
	// ErrPlanMismatch: the approval is for another saved plan (terraform_apply).
	ErrPlanMismatch = errors.New("approval is for another plan")
	// ErrTooLong: the token lives longer (issue to expiry) than the verifier's policy allows
	// (spec.approval.tokenTTL), although within MaxTokenTTL.
	ErrTooLong = errors.New("approval token lives longer than the policy allows")
	// ErrReplayed: the token's ID was used before.
	ErrReplayed = errors.New("approval token already used")
	// ErrNotEnoughApprovals: the tokens of one call are signed by fewer distinct approvers than the call
	// needs (the largest approvals_required among them). The error is a *NotEnoughApprovalsError, which says
	// how many, as "1 of 2 approvals".
	ErrNotEnoughApprovals = errors.New("not enough approvals")
	// ErrDuplicateApprover: one approver signed more than one of the tokens of one call. The same approver
	// twice counts once, so the set is refused rather than counted.
	ErrDuplicateApprover = errors.New("the same approver signed more than one of the approvals")
	// ErrOtherRequest: the tokens of one call approve different requests.
	ErrOtherRequest = errors.New("the approval tokens are for different requests")

	// ErrNotFound: no request with that ID (or none matching the search).
	ErrNotFound = errors.New("approval request not found")
	// ErrNotPending: the request was already decided, so it can no longer be granted or denied.
	ErrNotPending = errors.New("approval request is not pending")
	// ErrNotGranted: the request is pending or denied, so there is nothing to consume.
	ErrNotGranted = errors.New("approval request is not granted")
	// ErrConsumed: the grant was consumed before.
	ErrConsumed = errors.New("approval already consumed")
	// ErrAlreadyApproved: this approver key has already approved the request. An approver counts once, however
	// often they approve, so a request that needs two approvals needs two different approvers.
	ErrAlreadyApproved = errors.New("this approver has already approved the request")

	// ErrTampered: the approvals database contradicts itself: a request's stored params_hash is not the hash
	// of its stored tool and parameters, or the parameters are not stored in canonical form. The MCP server
	// owns that file, so it can write anything there; what the approver shows and what it signs must both
	// follow from the parameters, never from a column next to them.
	ErrTampered = errors.New("the approvals database was changed behind the store's back")

	// ErrNoDatabase: OpenStore was told not to create the database (WithoutCreate) and there is none.
	ErrNoDatabase = errors.New("approvals database does not exist")

	// ErrBadPassphrase: the passphrase does not decrypt the key file.
	ErrBadPassphrase = errors.New("wrong passphrase")
	// ErrPrivateKeyMaterial: a JWK offered as a public key carries secret members (d, p, q, ...): whoever sent
	// it sent the private key, which must never leave the approver's machine.
	ErrPrivateKeyMaterial = errors.New("private key material")
)
