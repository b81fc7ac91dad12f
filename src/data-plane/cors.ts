// CORS for metered and checkout URLs: a browser agent on another origin may pay and read the x402 headers.
// Nothing here carries credentials (a payment header is the credential, and it is never a cookie), so every
// origin is allowed with '*'. Every value is a constant: answers copy them, nothing is built per request.
import type { HttpRequest, HttpResponse } from './uws.ts'

/** What a browser script may read besides the CORS-safelisted headers. */
export const EXPOSED_HEADERS =
  'PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, WWW-Authenticate, Payment-Receipt, X-Pass-Uses-Left, X-Request-Id, Retry-After, RateLimit, RateLimit-Policy'

/** Flat [name, value, …] as writeError takes them. */
export const CORS_HEADERS: readonly string[] = [
  'access-control-allow-origin',
  '*',
  'access-control-expose-headers',
  EXPOSED_HEADERS,
]
/** Retry-After with CORS, for an answer that says when to try again (a scheme's verdict carries the seconds). */
export function retryAfterHeaders(seconds: number | undefined): readonly string[] | undefined {
  return seconds === undefined ? undefined : ['retry-after', String(seconds), ...CORS_HEADERS]
}

/** The same as pairs, for the proxy hooks' header list (shared constants: never mutated). */
export const CORS_PAIRS: ReadonlyArray<[string, string]> = [
  ['access-control-allow-origin', '*'],
  ['access-control-expose-headers', EXPOSED_HEADERS],
]

// Sent when the preflight names no headers. x402 clients send their payment in X-PAYMENT (v1) or
// PAYMENT-SIGNATURE (v2), a pass holder its sign-in in SIGN-IN-WITH-X; @x402/fetch also sets
// Access-Control-Expose-Headers on its own request.
const DEFAULT_ALLOWED_HEADERS =
  'X-PAYMENT, PAYMENT-SIGNATURE, SIGN-IN-WITH-X, Content-Type, Authorization, X-Request-Id, Access-Control-Expose-Headers'
const ALLOWED_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS'
// A header list as browsers send it: tokens separated by commas (RFC 9110); anything else is not echoed.
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$/

/**
 * OPTIONS on a metered or checkout URL. A CORS preflight (it names Access-Control-Request-Method) is answered
 * here: nothing is looked up, claimed or forwarded. Any other OPTIONS is a call like the others and goes on
 * to the route (uWS `setYield`).
 */
export function preflight(res: HttpResponse, req: HttpRequest): void {
  if (req.getHeader('access-control-request-method') === '') {
    req.setYield(true)
    return
  }
  // The upstream API behind a metered URL may take any header: the ones the browser asks for are allowed
  // (payment headers included), as long as they are a plain list of header names.
  const asked = req.getHeader('access-control-request-headers')
  const allowed =
    asked !== '' && asked.length <= 2048 && HEADER_LIST.test(asked) ? asked : DEFAULT_ALLOWED_HEADERS
  res
    .writeStatus('204 No Content')
    .writeHeader('access-control-allow-origin', '*')
    .writeHeader('access-control-allow-methods', ALLOWED_METHODS)
    .writeHeader('access-control-allow-headers', allowed)
    .writeHeader('access-control-max-age', '600')
    .writeHeader('cache-control', 'no-store')
    .end()
}
