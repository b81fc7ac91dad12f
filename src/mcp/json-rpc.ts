// What an MCP JSON-RPC request asks for, read from its body once: a protocol method (free), a `tools/call`
// of a named tool, or something that is not a JSON-RPC request (refused with the JSON-RPC error for it).

/** The most of a JSON-RPC body read: tool arguments larger than this are refused with 413. */
export const MCP_BODY_MAX_BYTES = 1024 * 1024

/** The methods that may be priced: a tool by name, a resource by URI, a prompt by name. */
export type PricedMethod = 'tools/call' | 'resources/read' | 'prompts/get'

/** The x402 MCP extension binding's identifier (MCP 2026-07-28 client capabilities extension map). */
export const X402_EXTENSION = 'org.x402/payment'

/** Where mppx's MCP client puts its credential, and reads a challenge and a receipt (the MPP MCP transport). */
export const MPP_CREDENTIAL = 'org.paymentauth/credential'
export const MPP_PAYMENT_REQUIRED = 'org.paymentauth/payment-required'
export const MPP_RECEIPT = 'org.paymentauth/receipt'

export type McpRequest =
  /** `calls`: in a batch, the priceable requests it holds (refused when one of them has a price). */
  | { kind: 'protocol'; calls?: Array<{ method: PricedMethod; name: string }> }
  /** server/discover (MCP 2026-07-28): its answer advertises the x402 extension. */
  | { kind: 'discover'; id: string | number | null }
  /**
   * tools/list alone (not in a batch): its answer is annotated with each tool's price. `paged`: it asked for a
   * page after the first (params.cursor), so its answer is not the whole list.
   */
  | { kind: 'tools_list'; id: string | number | null; paged: boolean }
  /**
   * A call that may be priced: `name` is the tool's or prompt's name, or the resource's URI. `payment`: the
   * x402 PaymentPayload in params._meta["x402/payment"] (x402 MCP transport), if any. `extension`: the request
   * advertises the `org.x402/payment` extension (answer payment_required results); `resultType`: it speaks
   * MCP 2026-07-28 (its per-request protocol version is in _meta), so results carry resultType.
   */
  | {
      kind: 'tool_call'
      method: PricedMethod
      name: string
      id: string | number | null
      payment: object | null
      /**
       * An MPP credential in params._meta["org.paymentauth/credential"] (mppx's MCP client), as the
       * `Payment <base64url>` text of an Authorization header; null when none (or not an object).
       */
      mpp: string | null
      extension: boolean
      resultType: boolean
    }
  | { kind: 'invalid'; code: number; message: string; id: string | number | null }

export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600
export const INVALID_PARAMS = -32602

/** Reads one JSON-RPC body (a message, or a batch of them). */
export function readMcpRequest(body: Buffer | null): McpRequest {
  let doc: unknown
  try {
    doc = JSON.parse(body === null ? '' : body.toString('utf8'))
  } catch {
    return { kind: 'invalid', code: PARSE_ERROR, message: 'Parse error: the body is not JSON', id: null }
  }
  if (!Array.isArray(doc)) return readMessage(doc)
  // Batches (JSON-RPC 2.0; MCP 2025-03-26): protocol messages pass together; a priced call must come alone,
  // so that one payment pays for one call and its receipt names one tool.
  if (doc.length === 0)
    return { kind: 'invalid', code: INVALID_REQUEST, message: 'Invalid Request: empty batch', id: null }
  const calls: Array<{ method: PricedMethod; name: string }> = []
  for (const m of doc) {
    const one = readMessage(m)
    if (one.kind === 'invalid') return one
    if (one.kind === 'tool_call') {
      if (one.method === 'tools/call')
        return {
          kind: 'invalid',
          code: INVALID_REQUEST,
          message: 'Invalid Request: tools/call is priced per call here; send it alone, not in a batch',
          id: null,
        }
      calls.push({ method: one.method, name: one.name })
    }
  }
  return calls.length === 0 ? { kind: 'protocol' } : { kind: 'protocol', calls }
}

function readMessage(m: unknown): McpRequest {
  if (typeof m !== 'object' || m === null || Array.isArray(m))
    return { kind: 'invalid', code: INVALID_REQUEST, message: 'Invalid Request: not an object', id: null }
  const msg = m as Record<string, unknown>
  const id = typeof msg.id === 'string' || typeof msg.id === 'number' ? msg.id : null
  if (msg.jsonrpc !== '2.0')
    return { kind: 'invalid', code: INVALID_REQUEST, message: 'Invalid Request: jsonrpc must be "2.0"', id }
  if (typeof msg.method !== 'string') {
    // A client's answer to a server request (sampling, elicitation) carries result or error, no method.
    if (msg.id !== undefined && ('result' in msg || 'error' in msg)) return { kind: 'protocol' }
    return { kind: 'invalid', code: INVALID_REQUEST, message: 'Invalid Request: no method', id }
  }
  if (msg.method === 'tools/list') {
    const p = msg.params
    const paged = typeof p === 'object' && p !== null && (p as Record<string, unknown>).cursor !== undefined
    return { kind: 'tools_list', id, paged }
  }
  if (msg.method === 'server/discover') return { kind: 'discover', id }
  const method = msg.method
  if (method !== 'tools/call' && method !== 'resources/read' && method !== 'prompts/get')
    return { kind: 'protocol' }
  const params = msg.params
  const field = method === 'resources/read' ? 'uri' : 'name'
  const name =
    typeof params === 'object' && params !== null ? (params as Record<string, unknown>)[field] : undefined
  if (typeof name !== 'string')
    return {
      kind: 'invalid',
      code: INVALID_PARAMS,
      message: `Invalid params: ${method} needs params.${field}`,
      id,
    }
  const raw = (params as Record<string, unknown>)._meta
  const meta = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>) : {}
  const payment = meta['x402/payment']
  const caps = meta['io.modelcontextprotocol/clientCapabilities'] as Record<string, unknown> | undefined
  const extensions = typeof caps === 'object' && caps !== null ? caps.extensions : undefined
  return {
    kind: 'tool_call',
    method,
    name,
    id,
    payment: typeof payment === 'object' && payment !== null ? payment : null,
    mpp: mppCredentialText(meta[MPP_CREDENTIAL]),
    extension:
      typeof extensions === 'object' && extensions !== null && X402_EXTENSION in (extensions as object),
    resultType: typeof meta['io.modelcontextprotocol/protocolVersion'] === 'string',
  }
}

/** The request without its in-band payment: the MCP server has no use for a signed authorization. */
export function withoutPayment(body: Buffer): Buffer {
  const msg = JSON.parse(body.toString('utf8'))
  delete msg.params._meta['x402/payment']
  delete msg.params._meta[MPP_CREDENTIAL]
  if (Object.keys(msg.params._meta).length === 0) delete msg.params._meta
  return Buffer.from(JSON.stringify(msg))
}

/** A JSON-RPC error response as text. */
export function errorResponse(code: number, message: string, id: string | number | null): string {
  return JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } })
}

/**
 * The credential object of the MPP MCP transport as the wire text of an `Authorization: Payment` header: its
 * challenge's request (an object here) and opaque (or the `meta` mppx parsed it into) back to their base64url
 * canonical JSON, which the challenge's HMAC binds. null when it is not a credential's shape.
 */
export function mppCredentialText(value: unknown): string | null {
  if (typeof value !== 'object' || value === null) return null
  const { challenge, payload, source } = value as Record<string, unknown>
  if (typeof challenge !== 'object' || challenge === null) return null
  const { request, meta, opaque, ...rest } = challenge as Record<string, unknown>
  const wireOpaque =
    typeof opaque === 'string' ? opaque : meta !== undefined ? base64urlJson(meta) : undefined
  const wire = {
    challenge: {
      ...rest,
      ...(wireOpaque === undefined ? {} : { opaque: wireOpaque }),
      request: typeof request === 'string' ? request : base64urlJson(request),
    },
    payload,
    ...(source === undefined ? {} : { source }),
  }
  return `Payment ${Buffer.from(JSON.stringify(wire)).toString('base64url')}`
}

function base64urlJson(x: unknown): string {
  return Buffer.from(canonicalJson(x)).toString('base64url')
}

/** RFC 8785 for plain JSON (keys sorted by code unit, recursively; numbers and strings as JSON prints them). */
export function canonicalJson(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canonicalJson).join(',')}]`
  if (x !== null && typeof x === 'object') {
    const o = x as Record<string, unknown>
    const keys = Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort()
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`
  }
  return JSON.stringify(x) ?? 'null'
}
