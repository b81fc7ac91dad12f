// A call priced by its body (an MCP endpoint, src/mcp/): the body is read whole, bounded, before a 402 or a
// forward. A free method goes on unpaid (its answer perhaps rewritten: a stage), a priced one to its quote with
// what it bought and its in-band answers, a body that is not JSON-RPC is refused. Endpoints priced by route
// never reach this file.
import type { ErrorCode, ErrorDetails } from '../errors.ts'
import type { BodyPrice, BodyPricing } from '../pricing/body-price.ts'
import { type AgentCall, headerOf, priceByIdentity } from './call-identity.ts'
import type { LiveEndpoint } from './endpoint-cache.ts'
import type { RequestBody } from './proxy.ts'
import { setContentLength } from './request-body.ts'
import { type AnswerStages, RANK } from './stages/answer-stages.ts'

/** What a body-priced call bought (an MCP tool): its price, labels and in-band answers. */
export type PricedBody = Extract<BodyPrice, { ok: 'priced' }>

/** What body pricing asks of the metered call (metered.ts). */
export interface BodyPricedCall extends AgentCall {
  readonly body: RequestBody | null
  readonly endpoint: LiveEndpoint | null
  /** A payment the body carries stands in for the header (the x402 MCP transport's params._meta). */
  paymentHeader: string
  priced: PricedBody | null
  stages(): AnswerStages
  respondRefused(refusal: Extract<BodyPrice, { ok: 'refused' }>): void
  respondError(code: ErrorCode, details?: ErrorDetails): void
}

export function priceByBody(call: BodyPricedCall, pricing: BodyPricing): void {
  // Not read: the endpoint became body-priced after this request was taken (a change landed between).
  const body = call.body
  if (body === null) return call.respondUnavailable('the endpoint changed; retry', 'endpoint_changed')
  body.whole(pricing.maxBytes).then((whole) => {
    if (call.abort.aborted) return call.finishAborted()
    if (whole === 'too_large')
      return call.respondError('body_too_large', {
        message: `the JSON-RPC body is larger than ${pricing.maxBytes} bytes`,
      })
    const forward = call.forward!
    const endpoint = call.endpoint!
    const price = pricing.price(call.method, whole, {
      endpointId: call.endpointId,
      pathAndQuery: forward.pathAndQuery,
      origin: endpoint.target.origin,
      basePath: endpoint.target.basePath,
      accept: headerOf(forward.headers, 'accept'),
      mcpSession: headerOf(forward.headers, 'mcp-session-id') !== '',
    })
    if (price.ok === 'free') {
      if (price.rewriter !== undefined) call.stages().add(RANK.rewriter, price.rewriter())
      return call.forwardUnpaid()
    }
    if (price.ok === 'refused') return call.respondRefused(price)
    // A payment read from the body answers in the body too (receiptInAnswer); a payment header wins.
    const fromBody = call.paymentHeader === '' && price.payment !== null
    if (fromBody) call.paymentHeader = price.payment!
    call.priced = fromBody || price.receiptInAnswer === null ? price : { ...price, receiptInAnswer: null }
    const forwardBody = price.forwardBody
    // The payment read from the body is not forwarded (the MCP server has no use for it).
    if (forwardBody !== null && body.rewrite(() => forwardBody))
      setContentLength(forward.headers, body.length)
    // A priced tool, resource or prompt: who calls may change its price, as on an HTTP endpoint.
    if (endpoint.identity !== null) return priceByIdentity(call, endpoint.identity, price.quote)
    call.withQuote(price.quote)
  })
}
