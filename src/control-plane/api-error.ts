// The API's error vocabulary: one class, one table from code to HTTP status and type. Every code is in the README.

export const ERROR_CODES = {
  invalid_json: { status: 400, type: 'invalid_request_error' },
  invalid_body: { status: 400, type: 'invalid_request_error' },
  invalid_parameter: { status: 400, type: 'invalid_request_error' },
  invalid_wallet_address: { status: 400, type: 'invalid_request_error' },
  invalid_upstream_url: { status: 400, type: 'invalid_request_error' },
  upstream_not_allowed: { status: 400, type: 'invalid_request_error' },
  invalid_webhook_url: { status: 400, type: 'invalid_request_error' },
  invalid_idempotency_key: { status: 400, type: 'invalid_request_error' },
  missing_api_key: { status: 401, type: 'authentication_error' },
  invalid_api_key: { status: 401, type: 'authentication_error' },
  not_found: { status: 404, type: 'invalid_request_error' },
  route_not_found: { status: 404, type: 'invalid_request_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  idempotency_key_reused: { status: 409, type: 'idempotency_error' },
  idempotency_key_in_use: { status: 409, type: 'idempotency_error' },
  invalid_state: { status: 409, type: 'invalid_request_error' },
  body_too_large: { status: 413, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  rate_limited: { status: 429, type: 'rate_limit_error' },
  internal_error: { status: 500, type: 'api_error' },
  service_unavailable: { status: 503, type: 'api_error' },
} as const

export type ErrorCode = keyof typeof ERROR_CODES

export class ApiError extends Error {
  readonly status: number
  readonly type: string
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly param?: string,
    readonly headers?: Record<string, string>,
  ) {
    super(message)
    this.status = ERROR_CODES[code].status
    this.type = ERROR_CODES[code].type
  }
}

export function errorBody(error: ApiError, requestId: string): string {
  const inner: Record<string, string> = { type: error.type, code: error.code, message: error.message }
  if (error.param) inner.param = error.param
  return JSON.stringify({ error: inner, request_id: requestId })
}
