// Every error code once (HTTP status, type, default message) and the one writer every plane answers through:
// the body is always {"error":{type,code,message,param?}, …, "request_id"} and x-request-id is always set.

import type { HttpResponse } from 'uWebSockets.js'
import { STATUS_CODES } from 'node:http'

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'idempotency_error'
  | 'rate_limit_error'
  | 'upstream_error'
  | 'api_error'

interface ErrorSpec {
  readonly status: number
  readonly type: ErrorType
  readonly message: string
}

const e = (status: number, type: ErrorType, message: string): ErrorSpec => ({ status, type, message })
const INVALID = 'invalid_request_error'

/** The registry. docs/api.md's Errors section lists the same codes (a test keeps the two equal). */
export const ERRORS = {
  // Management API (control plane)
  invalid_json: e(400, INVALID, 'the body is not valid JSON'),
  invalid_body: e(400, INVALID, 'the body must be a JSON object'),
  invalid_parameter: e(400, INVALID, 'a parameter is missing, of the wrong type or unknown'),
  invalid_wallet_address: e(400, INVALID, 'not a valid wallet address'),
  invalid_upstream_url: e(400, INVALID, 'upstream_url must be an http(s) URL'),
  upstream_not_allowed: e(400, INVALID, 'the upstream is in a private, loopback or link-local range'),
  invalid_webhook_url: e(400, INVALID, 'the webhook URL is not allowed'),
  invalid_idempotency_key: e(400, INVALID, 'Idempotency-Key must be 1-255 visible ASCII characters'),
  missing_api_key: e(401, 'authentication_error', 'send an API key as Authorization: Bearer <key>'),
  invalid_api_key: e(401, 'authentication_error', 'the API key is not valid'),
  // Dashboard sessions (an API key exchanged for an HttpOnly cookie)
  invalid_session: e(401, 'authentication_error', 'the dashboard session is not valid; sign in again'),
  session_expired: e(401, 'authentication_error', 'the dashboard session has expired; sign in again'),
  invalid_csrf_token: e(403, 'authentication_error', "send the session's CSRF token as X-CSRF-Token"),
  not_found: e(404, INVALID, 'no such object'),
  route_not_found: e(404, INVALID, 'no such route'),
  method_not_allowed: e(405, INVALID, 'the method is not allowed here'),
  idempotency_key_reused: e(409, 'idempotency_error', 'this Idempotency-Key was used with another request'),
  idempotency_key_in_use: e(409, 'idempotency_error', 'the first request with this key is still running'),
  invalid_state: e(409, INVALID, 'the object is not in a state that allows this'),
  settle_before_answer_unavailable: e(
    409,
    INVALID,
    'this service cannot settle x402 payments before the answer (no settler key configured)',
  ),
  body_too_large: e(413, INVALID, 'the body is too large'),
  unsupported_media_type: e(415, INVALID, 'send the body as JSON with Content-Type: application/json'),
  rate_limited: e(429, 'rate_limit_error', 'too many requests; retry after the Retry-After delay'),
  internal_error: e(500, 'api_error', 'something went wrong on our side; it has been logged'),
  service_unavailable: e(503, 'api_error', 'a dependency is unavailable; retry shortly'),
  // Metered calls (/m/*)
  endpoint_not_found: e(404, INVALID, 'no active metered endpoint'),
  websocket_not_allowed: e(400, INVALID, 'this endpoint does not take WebSocket sessions'),
  // Passes (/pass/*)
  pass_not_offered: e(404, INVALID, 'this endpoint sells no pass'),
  pass_opening: e(
    503,
    'api_error',
    'the pass was paid and is being opened; retry shortly with the same payment (it is not charged again)',
  ),
  payment_in_progress: e(
    409,
    INVALID,
    'this proof is being used by another request right now; retry after it finishes (do not pay again)',
  ),
  settlement_backlog: e(
    503,
    'api_error',
    'x402 payments are paused while settlements catch up; retry after Retry-After seconds with the same or a new authorization',
  ),
  settlement_halted: e(
    503,
    'api_error',
    'x402 payments are refused while USDC cannot move money to the treasury (the token paused, or the treasury blacklisted); retry after Retry-After seconds',
  ),
  verification_unavailable: e(503, 'api_error', 'the chain could not be reached to verify the payment'),
  replication_unsafe: e(
    503,
    'api_error',
    'paid calls are paused: the database has no synchronous standby, so a failover could forget this payment; nothing was taken, retry after Retry-After',
  ),
  upstream_unreachable: e(502, 'upstream_error', 'The upstream could not be reached.'),
  upstream_timeout: e(504, 'upstream_error', 'The upstream did not answer in time.'),
  upstream_forbidden: e(
    502,
    'upstream_error',
    'The upstream address is in a private, loopback or link-local range, which is refused.',
  ),
  agent_blocked: e(
    403,
    'invalid_request_error',
    'this endpoint does not serve this caller: its identity rules block the agent (or an unsigned call); nothing was charged',
  ),
  invalid_path: e(
    400,
    INVALID,
    'the path may not contain dot segments (. or ..), encoded dots, encoded slashes, backslashes, malformed percent-escapes, or percent-encoded bytes that are not valid UTF-8 (such as %c0%ae or %ff)',
  ),
  // Edge checks of the public port (every route family)
  invalid_framing: e(
    400,
    INVALID,
    'conflicting or invalid Content-Length or Transfer-Encoding; the connection is closed',
  ),
  headers_too_large: e(431, INVALID, 'the request headers are too many or too large'),
  length_required: e(
    411,
    INVALID,
    'send the body with a Content-Length: chunked request bodies are refused; the connection is closed',
  ),
  // Admin port
  admin_unauthorized: e(401, 'authentication_error', 'send Authorization: Bearer <ADMIN_TOKEN>'),
  admin_route_disabled: e(404, INVALID, 'this admin route is off: set ADMIN_TOKEN to enable it'),
  // Checkout (/pay/*)
  payment_not_found: e(404, INVALID, 'no such payment'),
  payment_already_paid: e(409, INVALID, 'the payment is already paid'),
  payment_paid: e(410, INVALID, 'the payment is paid; nothing is due'),
  payment_expired: e(410, INVALID, 'the payment has expired'),
  payment_canceled: e(410, INVALID, 'the payment was canceled'),
} as const satisfies Record<string, ErrorSpec>

export type ErrorCode = keyof typeof ERRORS

/**
 * Why a 402 asks for payment (its `error` field, and the x402 challenge's reason), declared once. `final`:
 * retrying the same proof cannot succeed, so the answer carries no Retry-After; only payment_pending (a
 * transaction the node knows, not yet mined or confirmed) is worth retrying as it is.
 */
export const PAYMENT_REQUIRED_REASONS = {
  payment_required: 'no proof was sent',
  invalid_proof: 'the header is neither a transaction hash nor an x402 payload',
  payment_pending:
    'the transaction is known but not mined or not confirmed within verify.wait_ms; retry after Retry-After',
  transaction_not_found:
    'the chain did not know the transaction hash within verify.wait_ms (a typo, or another network); final',
  transaction_failed: 'the transaction reverted',
  no_transfer: 'the transaction moved no token',
  wrong_asset: 'a token other than the configured USDC',
  wrong_recipient: 'the USDC went elsewhere',
  underpaid: 'less than the price, or than a quote still holding',
  proof_too_old: 'older than chain.max_proof_age_ms',
  own_settlement:
    'a settlement tollgate sent (from its treasury or a settler key), or a transfer out of its channel contract: its money already paid the calls and payments it carried; final',
  authorization_transfer:
    'the transfer was made by an EIP-3009 authorization: that money is the authorization’s (paid as x402 or MPP), not the hash’s; final',
  proof_already_used: 'claimed by another call or payment',
  wrong_network: 'an x402 payload for another network',
  invalid_signature: 'the authorization is not signed by its payer',
  authorization_not_yet_valid: 'validAfter is in the future',
  authorization_expired: 'validBefore is past, or within 6 s',
  insufficient_funds:
    "the payer's balance is below the amount (upto: the maximum) plus its authorizations and permits not settled yet (upto: or another payment's Permit2 approval is pending)",
  unsupported_proof: 'a scheme other than exact (or any x402 payload at checkout)',
  wrong_amount: 'exact means exact: an authorization for more than the price',
  requirements_mismatch: 'v2: accepted is not the advertised requirement',
  smart_wallet_not_deployed:
    'an ERC-6492 signature of a wallet not deployed yet (upto; exact where the chain lacks the AuthorizationBatcher)',
  smart_wallet_factory_not_allowed:
    'an ERC-6492 signature of a wallet not deployed yet, of a factory not in x402.eip6492_factories',
  simulation_failed: "the settlement's dry run reverted",
  scheme_not_offered: 'a scheme tollgate has but not here (exact where the amount varies: usage pricing)',
  permit2_allowance_required:
    'x402 upto: the payer has not approved Permit2 for the maximum (or signed an eip2612GasSponsoring approval)',
  // x402 upto's eip2612GasSponsoring approval (docs/x402.md); the names are the published facilitator's.
  permit2_allowance_pending:
    "x402 upto: another payment's eip2612GasSponsoring approval of Permit2 is not settled yet; pay again once it is",
  eip2612_nonce_mismatch: "x402 upto: the approval's nonce is not the token's current one for the payer",
  eip2612_from_mismatch: "x402 upto: the approval is not from the permit's payer",
  eip2612_asset_mismatch: 'x402 upto: the approval is for another token',
  eip2612_spender_not_permit2: 'x402 upto: the approval names a spender other than Permit2',
  permit2_2612_amount_mismatch: "x402 upto: the approval's value is not the permit's maximum",
  eip2612_deadline_expired: "x402 upto: the approval's deadline is past, or within 6 s",
  invalid_eip2612_signature: 'x402 upto: the approval is not signed by the payer',
  // A signed-in call on a pass (docs/passes.md); the invalid_siwx_* codes are the sign-in-with-x spec's.
  no_live_pass:
    'signed in, but the wallet holds no pass with uses and time left here (none bought, used up, expired)',
  invalid_siwx_header: 'SIGN-IN-WITH-X is not base64 JSON of a sign-in payload',
  invalid_siwx_chain_id: 'the sign-in names another chain than the payment network',
  invalid_siwx_nonce: 'the sign-in nonce is malformed, or was used before (a sign-in serves once)',
  invalid_siwx_uri_mismatch: "the sign-in's uri is not this origin and endpoint",
  invalid_siwx_domain_mismatch: "the sign-in's domain is not the configured public host",
  invalid_siwx_issued_at: 'issuedAt is not a timestamp',
  invalid_siwx_issued_at_too_old: 'issuedAt is more than 5 minutes old',
  invalid_siwx_issued_at_in_future: 'issuedAt is in the future',
  invalid_siwx_expiration_time: 'expirationTime is not a timestamp',
  invalid_siwx_expired: 'expirationTime is past',
  invalid_siwx_not_before: 'notBefore is not a timestamp',
  invalid_siwx_not_yet_valid: 'notBefore is in the future',
  invalid_siwx_signature: "the signature is not the address's over the EIP-4361 message",
  invalid_siwx_malformed_signature: 'the signature cannot be decoded',
  invalid_siwx_unsupported_chain: 'a chain namespace other than eip155',
  invalid_siwx_verifier_error: 'the signature could not be checked',
} as const

/** An expected failure of a request, thrown in the control plane and mapped to HTTP by its code. */
export class ApiError extends Error {
  readonly status: number
  readonly type: ErrorType
  constructor(
    readonly code: ErrorCode,
    message: string = ERRORS[code].message,
    readonly param?: string,
    readonly headers?: Record<string, string>,
    options?: { cause?: unknown },
  ) {
    super(message, options)
    this.status = ERRORS[code].status
    this.type = ERRORS[code].type
  }
}

export interface ErrorDetails {
  /** Replaces the code's default message. */
  message?: string
  param?: string
  /** Extra top-level fields of the body (e.g. checkout's `payment` and `refund`). */
  extra?: Record<string, unknown>
}

// The default bodies up to the request id, built once: the hot path only concatenates the id.
const BODY_PREFIX = new Map<ErrorCode, string>()
const STATUS_LINE = new Map<ErrorCode, string>()
for (const code of Object.keys(ERRORS) as ErrorCode[]) {
  const spec = ERRORS[code]
  BODY_PREFIX.set(
    code,
    `{"error":${JSON.stringify({ type: spec.type, code, message: spec.message })},"request_id":"`,
  )
  STATUS_LINE.set(code, `${spec.status} ${STATUS_CODES[spec.status] ?? 'Unknown'}`)
}

/**
 * The JSON error body. Request ids are token characters (see request-id.ts), so they need no escaping.
 */
export function errorBody(code: ErrorCode, requestId: string, details?: ErrorDetails): string {
  if (details === undefined) return `${BODY_PREFIX.get(code)}${requestId}"}`
  const spec = ERRORS[code]
  const error: Record<string, string> = {
    type: spec.type,
    code,
    message: details.message ?? spec.message,
  }
  if (details.param) error.param = details.param
  return JSON.stringify({ error, ...details.extra, request_id: requestId })
}

/** The status line of an error code, precomputed (the dashboard's own routes answer with it). */
export function errorStatusLine(code: ErrorCode): string {
  return STATUS_LINE.get(code)!
}

export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8'

/** Control plane: the ApiResponse of an ApiError (headers merged, x-request-id always set). */
export function apiErrorResponse(
  error: ApiError,
  requestId: string,
  baseHeaders: Record<string, string>,
): { status: number; headers: Record<string, string>; body: string } {
  return {
    status: error.status,
    headers: { ...baseHeaders, ...error.headers, 'x-request-id': requestId },
    body: errorBody(error.code, requestId, { message: error.message, param: error.param }),
  }
}

// uWS corks a socket while it parses what one read brought, and closes a connection whose answer asked for
// it only once uncorked: by then it has parsed, and handed to their routes, every request that followed in
// the same read (a request smuggled behind a framing error among them). A write larger than its 16 KiB cork
// buffer goes to the socket at once, and end() then closes the connection before the parser reads on. So
// an answer that closes the connection is padded past that size with JSON whitespace (any JSON parser skips
// it); such answers go only to broken or hostile requests.
const CLOSE_PADDING = ' '.repeat(16 * 1024 + 1)

/**
 * Data plane: writes a whole error answer on a uWS response. Call it inside res.cork() when after an await.
 * `headers` is a flat [name, value, name, value…] list, so callers pass constants without allocating.
 * `closeConnection`: the connection is closed once this answer is written, and nothing after it is read.
 */
export function writeError(
  res: HttpResponse,
  code: ErrorCode,
  requestId: string,
  details?: ErrorDetails,
  headers?: readonly string[],
  closeConnection = false,
): void {
  res
    .writeStatus(STATUS_LINE.get(code)!)
    .writeHeader('content-type', JSON_CONTENT_TYPE)
    .writeHeader('x-request-id', requestId)
  if (headers !== undefined)
    for (let i = 0; i < headers.length; i += 2) res.writeHeader(headers[i]!, headers[i + 1]!)
  if (closeConnection) res.end(errorBody(code, requestId, details) + CLOSE_PADDING, true)
  else res.end(errorBody(code, requestId, details))
}
