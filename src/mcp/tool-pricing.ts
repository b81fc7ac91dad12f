// An MCP endpoint's price for one request, read from its JSON-RPC body: protocol methods and free tools
// pass free; a `tools/call` pays its tool's price, or the default (a tool the merchant did not name);
// anything else is answered with its JSON-RPC error and nothing is forwarded.

import { toDollars } from '../money.ts'
import type { BodyPrice, BodyPricing } from '../pricing/body-price.ts'
import { presentPricing } from '../pricing/input.ts'
import { headlinePrice, type Pricing } from '../pricing/model.ts'
import type { Quote } from '../schemes/scheme.ts'
import type { McpPricing } from './config.ts'
import { paymentRequiredResult, ResultRewriter, receiptRewriter } from './in-band.ts'
import { errorResponse, MCP_BODY_MAX_BYTES, readMcpRequest, withoutPayment } from './json-rpc.ts'
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
  quote: (amountAtomic: bigint, varies: boolean, tool: string | null) => Quote,
  options: McpCatalogOptions = { catalog: null, onToolsListed: null },
): BodyPricing {
  const priced = new Map<string, BodyPrice>()
  for (const [name, p] of mcp.tools)
    priced.set(name, pricedAt(p, quote(headlinePrice(p), p.model === 'usage', name), name))
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
    price(method, body) {
      // GET opens the server's SSE stream, DELETE ends a session: no JSON-RPC call to price.
      if (method !== 'POST') return FREE
      const req = readMcpRequest(body)
      if (req.kind === 'protocol') return FREE
      if (req.kind === 'tools_list')
        return {
          ok: 'free',
          rewriter: () => new ResultRewriter(req.id, (result) => annotate(result, req.paged)),
        }
      if (req.kind === 'invalid')
        return {
          ok: 'refused',
          status: '400 Bad Request',
          contentType: JSON_TYPE,
          body: errorResponse(req.code, req.message, req.id),
        }
      const known = priced.get(req.name)
      if (known !== undefined) return inBand(known, req.id, req.payment, body)
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
      return inBand(p, req.id, req.payment, body)
    },
  }

  /**
   * The x402 MCP transport: a payment in params._meta is read like a payment header, its receipt goes into
   * the result's _meta, and refusals are answered in-band when the endpoint says so or the call paid in-band.
   */
  function inBand(
    p: BodyPrice,
    id: string | number | null,
    payment: object | null,
    body: Buffer | null,
  ): BodyPrice {
    if (p.ok !== 'priced' || (payment === null && !mcp.inBand)) return p
    return {
      ...p,
      payment: payment === null ? null : Buffer.from(JSON.stringify(payment)).toString('base64'),
      forwardBody: payment === null || body === null ? null : withoutPayment(body),
      paymentRequired: (required) => paymentRequiredResult(id, required),
      receiptInAnswer: payment === null ? null : (settlement) => receiptRewriter(id, JSON.parse(settlement)),
    }
  }
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

function pricedAt(p: Pricing, quote: Quote, name: string): BodyPrice {
  return {
    ok: 'priced',
    quote,
    usage: p.model === 'usage' ? p : null,
    model: p.model === 'usage' ? 'usage' : 'fixed',
    label: name,
    metricLabel: name,
    observedLabel: name,
    payment: null,
    forwardBody: null,
    paymentRequired: null,
    receiptInAnswer: null,
  }
}
