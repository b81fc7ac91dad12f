// Agent identity around a metered call (Web Bot Auth, src/identity/; docs/agent-identity.md): on an endpoint
// with identity rules, who is calling decides the price. The signature is checked before anything is priced,
// claimed or forwarded, and its nonce claimed only for a call that will be served. Endpoints without rules
// read no signature and reach nothing here.

import type { ErrorCode } from '../errors.ts'
import { type CallAgent, callAgent, UNSIGNED } from '../identity/call-agent.ts'
import { countAgentCall, countIdentity } from '../identity/count-identity.ts'
import { messageView } from '../identity/message-view.ts'
import { decide } from '../identity/rules.ts'
import type { MessageView } from '../identity/signature-base.ts'
import { forPayment, type Identity } from '../identity/verify-request.ts'
import type { Quote } from '../schemes/scheme.ts'
import type { LiveIdentityRules } from './endpoint-cache.ts'
import type { ForwardRequest, UpstreamTarget } from './proxy.ts'

export interface MeteredIdentity {
  /** checkSignature with the configured keys and directories: synchronous, no nonce claimed. */
  verify(msg: MessageView): Identity
  /** Claims a verified signature's nonce (once across instances); only for a call that will be served. */
  claim(identity: Identity): Promise<Identity>
  /** The operator's signer names (bounded metric labels). */
  signerNames: ReadonlySet<string>
  /** The scheme callers reach this service by (the public URL's), for `@scheme` and `@target-uri`. */
  scheme(): string
}

/** What identity asks of the metered call it prices (metered.ts). */
export interface AgentCall {
  readonly ctx: { readonly identity?: MeteredIdentity }
  readonly abort: { readonly aborted: boolean }
  readonly method: string
  readonly endpointId: string
  readonly forward: ForwardRequest | null
  /** Who called and the rule that priced it, for the call row. */
  agent: CallAgent | null
  /** The call carries a payment (or a pass sign-in where a pass is sold): it will be served if it pays. */
  paying(): boolean
  withQuote(quote: Quote): void
  forwardUnpaid(): void
  finishAborted(): void
  respondError(code: ErrorCode): void
  respondUnavailable(message: string, reason: string, err?: unknown): void
}

/**
 * Prices the call by who is calling (`base`: what it costs without rules, its route's price or an MCP
 * tool's), then sends it on: to its quote, forwarded free, or refused.
 */
export function priceByIdentity(call: AgentCall, live: LiveIdentityRules, base: Quote): void {
  const forward = call.forward
  // Not read: the endpoint gained rules after this request was taken (a change landed between).
  if (forward === null) return call.respondUnavailable('the endpoint changed; retry', 'endpoint_changed')
  const deps = call.ctx.identity
  const paying = call.paying()
  const identity = checkSignature(deps, call, forward, paying)
  if (identity.status !== 'verified' || !served(live, identity, base, paying))
    return withIdentity(call, live, identity, base)
  deps!.claim(identity).then(
    (claimed) => {
      if (call.abort.aborted) return call.finishAborted()
      withIdentity(call, live, claimed, base)
    },
    (err) =>
      call.respondUnavailable('the signature could not be checked; retry shortly', 'identity_failed', err),
  )
}

function withIdentity(call: AgentCall, live: LiveIdentityRules, identity: Identity, base: Quote): void {
  const price = priceFor(call.ctx.identity, live, identity, base)
  if (price === null) return call.respondError('agent_blocked')
  call.agent = price.agent
  // Free for this caller: forwarded without payment, like a free MCP method; nothing is booked.
  if (price.quote === null) return call.forwardUnpaid()
  call.withQuote(price.quote)
}

const NO_SIGNERS: ReadonlySet<string> = new Set()
const UNSIGNED_IDENTITY: Identity = { status: 'unsigned' }

/** The signer names of the metric labels (none where identity is not checked). */
export function signerNames(deps: MeteredIdentity | undefined): ReadonlySet<string> {
  return deps?.signerNames ?? NO_SIGNERS
}

/**
 * The call's signature, checked (no nonce claimed yet): unsigned when it carries none or nothing checks
 * them. A browsing signature (Visa TAP) does not carry authority to pay: on a paying call it counts as failed.
 */
function checkSignature(
  deps: MeteredIdentity | undefined,
  call: AgentCall,
  forward: ForwardRequest,
  paying: boolean,
): Identity {
  const headers = forward.headers
  if (
    deps === undefined ||
    (headerOf(headers, 'signature-input') === '' && headerOf(headers, 'signature') === '')
  )
    return UNSIGNED_IDENTITY
  const fields: Record<string, string> = {}
  for (const [k, v] of headers) fields[k] = fields[k] === undefined ? v : `${fields[k]}, ${v}`
  const checked = deps.verify(
    messageView({
      method: call.method,
      scheme: deps.scheme(),
      host: fields.host ?? '',
      target: `/m/${call.endpointId}${forward.pathAndQuery}`,
      headers: fields,
    }),
  )
  return paying ? forPayment(checked) : checked
}

/**
 * Whether this verified call is served (free for its signer, or paying): only then is its nonce claimed. A 402
 * or a 403 serves nothing, so it writes nothing; the signature stays good for one served call.
 */
function served(live: LiveIdentityRules, identity: Identity, base: Quote, paying: boolean): boolean {
  const decision = decide(live.rules, identity, base.amountAtomic, base.varies)
  if (decision.kind === 'block') return false
  return decision.atomic === 0n || paying
}

/**
 * What this caller pays (`base`: the call's price without rules), counted: null when blocked; a null quote
 * when free for it (forwarded without payment, nothing booked).
 */
function priceFor(
  deps: MeteredIdentity | undefined,
  live: LiveIdentityRules,
  identity: Identity,
  base: Quote,
): { agent: CallAgent; quote: Quote | null } | null {
  const names = signerNames(deps)
  countIdentity(names, identity)
  const decision = decide(live.rules, identity, base.amountAtomic, base.varies)
  const signer = identity.status === 'verified' ? identity.signer : UNSIGNED
  if (decision.kind === 'block') {
    countAgentCall(names, signer, 'block')
    return null
  }
  countAgentCall(names, signer, decision.action)
  const agent = callAgent(identity, decision)
  if (decision.atomic === 0n) return { agent, quote: null }
  return { agent, quote: decision.action === 'endpoint_price' ? base : live.quoteFor(decision.rule, base) }
}

/** Where a call goes: a verified agent's call carries x-tollgate-agent to the endpoint's upstream. */
export function targetFor(target: UpstreamTarget, agent: CallAgent | null): UpstreamTarget {
  if (agent === null || agent.keyid === null) return target
  return { ...target, injectHeaders: [...target.injectHeaders, ['x-tollgate-agent', agent.signer]] }
}

/** A request header's value ('' when absent); names are lower-case as uWS gives them. */
export function headerOf(headers: Array<[string, string]>, name: string): string {
  for (const h of headers) if (h[0] === name) return h[1]
  return ''
}
