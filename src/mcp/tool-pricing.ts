// An MCP endpoint's price for one request, read from its JSON-RPC body: protocol methods and free tools
// pass free; a `tools/call` pays its tool's price, or the default (a tool the merchant did not name);
// anything else is answered with its JSON-RPC error and nothing is forwarded.

import { toDollars } from '../money.ts'
import type { BodyAnswer, BodyPrice, BodyPricing, BodyRequestPlace } from '../pricing/body-price.ts'
import { presentPricing } from '../pricing/input.ts'
import { headlinePrice, type Pricing } from '../pricing/model.ts'
import type { MppProblem } from '../schemes/mpp-charge/problems.ts'
import type { Quote } from '../schemes/scheme.ts'
import type { McpPricing } from './config.ts'
import { paymentRequiredResult, ResultRewriter, withMppReceipt, withReceipt } from './in-band.ts'
import {
  errorResponse,
  INVALID_REQUEST,
  MCP_BODY_MAX_BYTES,
  type McpRequest,
  type PricedMethod,
  readMcpRequest,
  withoutPayment,
  X402_EXTENSION,
} from './json-rpc.ts'
import { PASS_THROUGH, type SseSession, SseStreamRewriter, sseSessions } from './sse-transport.ts'
import { type CatalogTool, readCatalog } from './tool-catalog.ts'

const FREE: BodyPrice = { ok: 'free' }
const JSON_TYPE = 'application/json'

/** What the endpoint knows of the server's tools, for discovery (src/mcp/tool-catalog.ts). */
export interface McpCatalogOptions {
  /** The tools the server last listed (null: none seen yet). */
  catalog: readonly CatalogTool[] | null
  /** Given each tools/list answer's tools (complete: the whole list, not a page); null: not kept. */
  onToolsListed: ((tools: CatalogTool[], complete: boolean) => void) | null
}

/**
 * @param quote the 402 of one price, built once per tool here (not per request): `tool` names it in the
 * challenge's description (and describes it to catalogs); null for the default price of unknown tools.
 */
export function mcpBodyPricing(
  mcp: McpPricing,
  quote: (amountAtomic: bigint, varies: boolean, tool: string | null, what?: 'resource' | 'prompt') => Quote,
  options: McpCatalogOptions = { catalog: null, onToolsListed: null },
): BodyPricing {
  const { priced, pricedResources, pricedPrompts } = priceTables(mcp, quote)
  const defaultQuote = quote(mcp.defaultAtomic, false, null)
  // Tools the server listed: a call of one at the default price gets a 402 that names it, and its paid calls
  // are counted under its name for discovery. Anything else a client names is "other" there.
  const listedNames = new Set((options.catalog ?? []).map((t) => t.name))
  const listedQuotes = new Map<string, Quote>()
  /** The default price's 402 for this tool: its own when the server listed it (built once), else shared. */
  const defaultQuoteOf = (name: string): Quote => {
    if (!listedNames.has(name)) return defaultQuote
    let q = listedQuotes.get(name)
    if (q === undefined) {
      q = quote(mcp.defaultAtomic, false, name)
      listedQuotes.set(name, q)
    }
    return q
  }
  const byDefault = new Map<string, BodyPrice>()
  const annotate = toolsListAnnotator(mcp, options.onToolsListed)
  return {
    maxBytes: MCP_BODY_MAX_BYTES,
    quoteOf(tool) {
      const known = priced.get(tool)
      if (known !== undefined) return known.ok === 'priced' ? known.quote : null
      if (mcp.freeTools.has(tool) || mcp.unknownToolsFree) return null
      return defaultQuoteOf(tool)
    },
    price(method, body, at) {
      // GET opens the server's SSE stream (the legacy transport's carries its answers: see sse-transport.ts),
      // DELETE ends a session: no JSON-RPC call to price.
      if (method === 'GET' && at !== undefined)
        return { ok: 'free', rewriter: () => new SseStreamRewriter(at) }
      if (method !== 'POST') return FREE
      const req = readMcpRequest(body)
      if (req.kind === 'protocol') {
        // A batch may carry reads of resources and prompts: one with a price must come alone, as tools/call.
        const call = req.calls?.find((c) => pricedIn(c.method).has(c.name))
        if (call === undefined) return FREE
        return refused(
          INVALID_REQUEST,
          `Invalid Request: ${call.method} of ${call.name} is priced per call here; send it alone, not in a batch`,
          null,
        )
      }
      // A POST of a legacy-transport session whose stream this process holds: its answer is on that stream.
      const session = at === undefined ? undefined : sseSessions.get(at.endpointId, at.pathAndQuery)
      if (req.kind === 'tools_list') {
        if (session !== undefined) {
          if (req.id !== null) session.expect(req.id, (result) => annotate(result, req.paged))
          return FREE
        }
        return {
          ok: 'free',
          rewriter: () => new ResultRewriter(req.id, (result) => annotate(result, req.paged)),
        }
      }
      if (req.kind === 'discover') {
        // MCP 2026-07-28: the server's capabilities say this endpoint speaks the x402 extension binding.
        const edit = advertiseExtension
        if (session !== undefined) {
          if (req.id !== null) session.expect(req.id, edit)
          return FREE
        }
        return { ok: 'free', rewriter: () => new ResultRewriter(req.id, edit) }
      }
      if (req.kind === 'invalid') return refused(req.code, req.message, req.id)
      if (req.method !== 'tools/call') {
        const p = pricedIn(req.method).get(req.name)
        return p === undefined ? FREE : inBand(mcp, p, req, body, session, at)
      }
      const known = priced.get(req.name)
      if (known !== undefined) return inBand(mcp, known, req, body, session, at)
      if (mcp.freeTools.has(req.name) || mcp.unknownToolsFree) return FREE
      // A tool the merchant did not name costs the default; its name goes on the call row as given
      // (the metrics fold it into "other"). The map is bounded by what is kept: names are 1 line each.
      let p = byDefault.get(req.name)
      if (p === undefined) {
        p = {
          ok: 'priced',
          quote: defaultQuoteOf(req.name),
          usage: null,
          model: 'fixed',
          label: req.name.slice(0, 128),
          metricLabel: 'other',
          observedLabel: listedNames.has(req.name) ? req.name : 'other',
          payment: null,
          forwardBody: null,
          paymentRequired: null,
          receiptInAnswer: null,
        }
        if (byDefault.size < 1000) byDefault.set(req.name, p)
      }
      return inBand(mcp, p, req, body, session, at)
    },
  }

  function pricedIn(method: PricedMethod): Map<string, BodyPrice> {
    return method === 'resources/read' ? pricedResources : method === 'prompts/get' ? pricedPrompts : priced
  }
}

/** A JSON-RPC error answered as 400 before anything is forwarded. */
function refused(code: number, message: string, id: string | number | null): BodyPrice {
  return {
    ok: 'refused',
    status: '400 Bad Request',
    contentType: JSON_TYPE,
    body: errorResponse(code, message, id),
  }
}

/** The configured prices of tools, resources (by URI) and prompts (by name), each quoted once. */
function priceTables(
  mcp: McpPricing,
  quote: (amountAtomic: bigint, varies: boolean, tool: string | null, what?: 'resource' | 'prompt') => Quote,
) {
  const priced = new Map<string, BodyPrice>()
  for (const [name, p] of mcp.tools)
    priced.set(name, pricedAt(p, quote(headlinePrice(p), p.model === 'usage', name), name))
  // Resources by URI, prompts by name: on the call row and the metric as `resource:<uri>`, `prompt:<name>`
  // (names the merchant configured: bounded); not tools, so discovery counts them under "other".
  const pricedResources = new Map<string, BodyPrice>()
  for (const [uri, p] of mcp.resources)
    pricedResources.set(
      uri,
      pricedAt(p, quote(headlinePrice(p), p.model === 'usage', uri, 'resource'), `resource:${uri}`, 'other'),
    )
  const pricedPrompts = new Map<string, BodyPrice>()
  for (const [name, p] of mcp.prompts)
    pricedPrompts.set(
      name,
      pricedAt(p, quote(headlinePrice(p), p.model === 'usage', name, 'prompt'), `prompt:${name}`, 'other'),
    )
  return { priced, pricedResources, pricedPrompts }
}

/**
 * The x402 MCP transport: a payment in params._meta is read like a payment header, its receipt goes into
 * the result's _meta, and refusals are answered in-band when the endpoint says so or the call paid in-band.
 */
function inBand(
  mcp: McpPricing,
  p: BodyPrice,
  req: Extract<McpRequest, { kind: 'tool_call' }>,
  body: Buffer | null,
  session: SseSession | undefined,
  at: BodyRequestPlace | undefined,
): BodyPrice {
  const { id } = req
  // A payment in band: x402's PaymentPayload, or an MPP credential (mppx's MCP client).
  const payment = req.payment ?? (req.mpp === null ? null : { mpp: req.mpp })
  // How an unpaid call is answered in band: the extension binding when the request advertised it (on any
  // MCP endpoint: the client said it reads it); the tool-result binding for a tools/call when the endpoint
  // answers in band or the call paid in band; otherwise HTTP 402 (resources and prompts have no tool result).
  const binding = { extension: req.extension, resultType: req.resultType }
  const answersInBand = req.extension || (req.method === 'tools/call' && (mcp.inBand || payment !== null))
  if (p.ok !== 'priced' || (payment === null && !answersInBand)) return p
  const encoded =
    req.mpp !== null && req.payment === null
      ? req.mpp
      : payment === null
        ? null
        : Buffer.from(JSON.stringify(payment)).toString('base64')
  const forwardBody = payment === null || body === null ? null : withoutPayment(body)
  if (session !== undefined) {
    // Legacy transport, stream held here: the refusal goes onto the stream (the POST answers 202), and a
    // paid call's result is held there until its settlement is known, then carries it in its _meta.
    if (payment !== null && id !== null) session.expect(id, null)
    return {
      ...p,
      payment: encoded,
      forwardBody,
      paymentRequired: answersInBand
        ? (required, mpp, problem) => onStream(session, id, required, binding, mpp, problem)
        : null,
      receiptInAnswer:
        payment === null
          ? null
          : (settlement) => {
              if (id !== null) session.resolve(id, receiptEdit(req, settlement))
              return PASS_THROUGH
            },
    }
  }
  // A POST of the legacy transport whose stream is not held by this process (another worker or instance):
  // an answer in its body would be dropped by the client, which would wait for it on its stream in vain.
  // HTTP 402 fails the call at once instead; a payment it carries is still read, its result passes as is.
  const elsewhere = at !== undefined && !at.mcpSession && !at.accept.includes('text/event-stream')
  return {
    ...p,
    payment: encoded,
    forwardBody,
    paymentRequired:
      elsewhere || !answersInBand
        ? null
        : (required, mpp, problem) => paymentRequiredResult(id, required, binding, mpp, problem),
    receiptInAnswer:
      payment === null || elsewhere
        ? null
        : (settlement) => new ResultRewriter(id, receiptEdit(req, settlement)),
  }
}

/** The receipt into the result's _meta: x402's settlement, or MPP's receipt naming the challenge it paid. */
function receiptEdit(
  req: Extract<McpRequest, { kind: 'tool_call' }>,
  receipt: string,
): (result: Record<string, unknown>) => void {
  if (req.payment === null && req.mpp !== null) return withMppReceipt(JSON.parse(receipt), req.mpp)
  return withReceipt(JSON.parse(receipt))
}

/** The PaymentRequired answer put on the session's stream; the POST is answered as the server would (202). */
function onStream(
  session: SseSession,
  id: string | number | null,
  required: string,
  binding: { extension: boolean; resultType: boolean },
  mpp: string | null,
  problem: MppProblem | null,
): BodyAnswer {
  const answer = paymentRequiredResult(id, required, binding, mpp, problem)
  if (id !== null) session.resolve(id, null)
  if (!session.send(answer.body)) return answer
  return { status: '202 Accepted', contentType: 'text/plain; charset=utf-8', body: 'Accepted' }
}

/** A server/discover result: `org.x402/payment` added to its capabilities' extensions. */
function advertiseExtension(result: Record<string, unknown>): void {
  const caps = (
    typeof result.capabilities === 'object' && result.capabilities !== null ? result.capabilities : {}
  ) as Record<string, unknown>
  const ext = (
    typeof caps.extensions === 'object' && caps.extensions !== null ? caps.extensions : {}
  ) as object
  result.capabilities = { ...caps, extensions: { ...ext, [X402_EXTENSION]: {} } }
}

/**
 * What a tools/list answer becomes: each tool's price in its _meta["tollgate/price"] (the server's schema is
 * left as it is), after the server's own words were handed to the catalog (discovery) when it is kept.
 */
function toolsListAnnotator(
  mcp: McpPricing,
  onToolsListed: McpCatalogOptions['onToolsListed'],
): (result: Record<string, unknown>, paged: boolean) => void {
  const notes = new Map<string, object>()
  for (const [name, p] of mcp.tools) notes.set(name, priceNote(p))
  for (const name of mcp.freeTools) notes.set(name, { free: true })
  const otherNote = mcp.unknownToolsFree
    ? { free: true }
    : priceNote({ model: 'fixed', priceAtomic: mcp.defaultAtomic })
  return (result, paged) => {
    if (!Array.isArray(result.tools)) return
    // Read before the prices are added: the catalog keeps the server's words only.
    if (onToolsListed !== null) onToolsListed(readCatalog(result), !paged && result.nextCursor === undefined)
    for (const tool of result.tools as Array<Record<string, unknown>>) {
      if (typeof tool !== 'object' || tool === null || typeof tool.name !== 'string') continue
      const meta = typeof tool._meta === 'object' && tool._meta !== null ? tool._meta : {}
      tool._meta = { ...meta, 'tollgate/price': notes.get(tool.name) ?? otherNote }
    }
  }
}

/** A tool's price as tools/list shows it (dollars, and base units for the fixed price or the ceiling). */
function priceNote(p: Pricing): object {
  if (p.model === 'fixed')
    return { free: false, price: toDollars(p.priceAtomic), amount_atomic: p.priceAtomic.toString() }
  return { free: false, ...presentPricing(p), amount_atomic: headlinePrice(p).toString() }
}

function pricedAt(p: Pricing, quote: Quote, name: string, observedLabel = name): BodyPrice {
  return {
    ok: 'priced',
    quote,
    usage: p.model === 'usage' ? p : null,
    model: p.model === 'usage' ? 'usage' : 'fixed',
    label: name,
    metricLabel: name,
    observedLabel,
    payment: null,
    forwardBody: null,
    paymentRequired: null,
    receiptInAnswer: null,
  }
}
