// The public discovery routes: GET /.well-known/x402.json (this host's listed endpoints, as the x402 draft's
// per-origin manifest) and GET /discovery/resources (all listed endpoints, in the facilitator's list shape,
// each with what paid traffic observed over 7 days). A listed MCP endpoint is one item per paid tool. Both read
// listed endpoints and hourly rows, never the call history, and keep each answer for a few seconds
// (answerCache): a crawler costs one query per distinct URL per TTL, and waits for none it asked before.
import {
  type FacilitatorResourceRow,
  type ListedEndpointRow,
  listFacilitatorResources,
  listListedEndpoints,
  readAgentObserved,
  readFacilitatorObserved,
  readObserved,
  readToolObserved,
} from '../db/discovery.ts'
import type { Sql } from '../db/sql.ts'
import { manifestInput, manifestOutput, resourceMetadata } from '../discovery/listing.ts'
import { type McpToolListing, mcpBazaarExtension, mcpManifestInput } from '../discovery/mcp-tool.ts'
import { presentAgents, presentObserved } from '../discovery/observed.ts'
import { llmsTxt, mppOpenApi, type OpenApiInput, type PayableOperation } from '../discovery/openapi-mpp.ts'
import { type ErrorCode, type ErrorDetails, writeError } from '../errors.ts'
import { OPEN_SCHEMA } from '../mcp/tool-catalog.ts'
import { parseDollars } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import { requestIdFrom } from '../request-id.ts'
import type { Requirement } from '../schemes/scheme.ts'
import { CORS_HEADERS } from './cors.ts'
import { type EndpointCache, loadEndpoint, NOT_FOUND } from './endpoint-cache.ts'
import type { HttpRequest, HttpResponse } from './uws.ts'

const WINDOW_DAYS = 7
const DAY_MS = 86_400_000
const MAX_LIMIT = 100
/** The manifest lists at most this many endpoints (the paginated list has them all). */
const MANIFEST_MAX = 1000

export interface DiscoveryDeps {
  sql: Sql
  endpoints: EndpointCache
  logger: Logger
  publicUrl(): string
  /** This instance's network, by its x402 v1 name, its CAIP-2 id and tollgate's name: the network filter. */
  networks: readonly string[]
  cacheTtlMs: number
  now?: () => number
}

class BadQuery extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(message)
  }
}

interface Answer {
  body: string
  atMs: number
}

/**
 * The answers kept per key (a route and its query string): fresh for `ttlMs`; then, up to twice that age,
 * still answered at once while one read refreshes it in the background (stale-while-revalidate), so a crawler
 * never waits for the read the cache is there to spare, and no answer is older than 2 × ttl. One read per key
 * at a time: requests that find none kept share the read in flight. Older or never kept: the request waits
 * for the read. A failed background read leaves the kept answer to serve until it is too old.
 */
export function answerCache(ttlMs: number, now: () => number, logger: Logger) {
  const kept = new Map<string, Answer>()
  const reading = new Map<string, Promise<Answer>>()
  const read = (key: string, build: () => Promise<unknown>): Promise<Answer> => {
    let pending = reading.get(key)
    if (pending === undefined) {
      pending = build().then((value) => {
        const answer = { body: typeof value === 'string' ? value : JSON.stringify(value), atMs: now() }
        // Bounded: distinct query strings beyond this evict the oldest answers.
        if (kept.size >= 256 && !kept.has(key)) kept.delete(kept.keys().next().value!)
        kept.set(key, answer)
        return answer
      })
      reading.set(key, pending)
      const done = () => reading.delete(key)
      pending.then(done, done)
    }
    return pending
  }
  return (key: string, build: () => Promise<unknown>): Promise<Answer> => {
    const hit = kept.get(key)
    const age = hit === undefined ? Number.POSITIVE_INFINITY : now() - hit.atMs
    if (age < ttlMs) return Promise.resolve(hit!)
    if (age < 2 * ttlMs) {
      read(key, build).catch((err) => logger.error('discovery refresh failed', { key, err }))
      return Promise.resolve(hit!)
    }
    return read(key, build)
  }
}

export function createDiscoveryRoutes(deps: DiscoveryDeps) {
  const now = deps.now ?? Date.now
  const cached = answerCache(deps.cacheTtlMs, now, deps.logger)

  const serve = (
    res: HttpResponse,
    req: HttpRequest,
    key: string,
    build: () => Promise<unknown>,
    type = 'application/json; charset=utf-8',
  ) => {
    const requestId = requestIdFrom(req.getHeader('x-request-id'))
    let aborted = false
    res.onAborted(() => {
      aborted = true
    })
    const fail = (code: ErrorCode, details: ErrorDetails) =>
      res.cork(() => writeError(res, code, requestId, details, CORS_HEADERS))
    let pending: Promise<Answer>
    try {
      pending = cached(key, build)
    } catch (err) {
      if (err instanceof BadQuery)
        return fail('invalid_parameter', { message: err.message, param: err.param })
      throw err
    }
    pending.then(
      (answer) => {
        if (aborted) return
        // What is left of the answer's freshness: an answer served stale is not to be kept downstream.
        const maxAge = Math.max(0, Math.floor((deps.cacheTtlMs - (now() - answer.atMs)) / 1000))
        res.cork(() => {
          res.writeStatus('200 OK').writeHeader('content-type', type)
          res.writeHeader('x-request-id', requestId)
          res.writeHeader('access-control-allow-origin', '*')
          res.writeHeader('cache-control', `public, max-age=${maxAge}`)
          res.end(answer.body)
        })
      },
      (err) => {
        deps.logger.error('discovery read failed', { request_id: requestId, err })
        if (!aborted)
          fail('verification_unavailable', { message: 'the listing could not be read; retry shortly' })
      },
    )
  }

  return {
    wellKnown(res: HttpResponse, req: HttpRequest): void {
      serve(res, req, 'manifest', () => manifest(deps, now()))
    },
    openApi(res: HttpResponse, req: HttpRequest): void {
      serve(res, req, 'openapi', () => openApiInput(deps).then(mppOpenApi))
    },
    llmsTxt(res: HttpResponse, req: HttpRequest): void {
      serve(res, req, 'llms', () => openApiInput(deps).then(llmsTxt), 'text/markdown; charset=utf-8')
    },
    resources(res: HttpResponse, req: HttpRequest): void {
      const raw = req.getQuery() ?? ''
      const query = new URLSearchParams(raw)
      // Checked before the cache: a bad query is a 400 however often it is asked.
      try {
        readListQuery(query, deps.networks)
      } catch (err) {
        if (!(err instanceof BadQuery)) throw err
        const requestId = requestIdFrom(req.getHeader('x-request-id'))
        writeError(
          res,
          'invalid_parameter',
          requestId,
          { message: err.message, param: err.param },
          CORS_HEADERS,
        )
        return
      }
      serve(res, req, `list?${raw}`, () => resources(deps, query, now()))
    },
  }
}

/**
 * The live 402's requirements of a listed endpoint (its GET price) or of one paid tool of it: advisory, the
 * 402 is authoritative.
 */
async function acceptsOf(deps: DiscoveryDeps, r: ListedEndpointRow): Promise<Requirement[]> {
  const live = await loadEndpoint(deps.endpoints, r.id)
  if (live === NOT_FOUND || !live.active) return []
  if (r.tool === null) return live.quoteFor('GET', '').challenge.accepts
  return live.bodyPricing?.quoteOf(r.tool)?.challenge.accepts ?? []
}

/** A paid MCP tool as the server listed it; a tool it has not listed yet takes any object of arguments. */
function toolOf(r: ListedEndpointRow): McpToolListing {
  const entry = r.tool_entry
  return {
    name: r.tool!,
    ...(entry?.description === undefined ? {} : { description: entry.description }),
    inputSchema: entry?.input_schema ?? OPEN_SCHEMA,
  }
}

/** An MCP tool's item changes with its endpoint and with what its server last listed. */
function lastUpdated(r: ListedEndpointRow): Date {
  const seen = r.tool === null ? null : r.catalog_seen_at
  return seen !== null && seen > r.updated_at ? seen : r.updated_at
}

/** One page of the list, each item with its 7-day figures (an MCP tool's own, counted per tool). */
async function resources(deps: DiscoveryDeps, query: URLSearchParams, nowMs: number) {
  const f = readListQuery(query, deps.networks)
  if (f === null) return { x402Version: 2, items: [], pagination: { limit: 0, offset: 0, total: 0 } }
  const { rows, total } = await listListedEndpoints(deps.sql, f)
  const since = new Date(nowMs - WINDOW_DAYS * DAY_MS)
  // The facilitator's cataloged resources follow the endpoints' items: a page runs on into them.
  const facilitated = await facilitatorItems(
    deps,
    {
      ...f,
      offset: Math.max(0, f.offset - total),
      limit: f.limit - rows.length,
    },
    since,
  )
  const endpointIds = rows.filter((r) => r.tool === null).map((r) => r.id)
  const [observed, agentObserved, toolObserved, accepts] = await Promise.all([
    readObserved(deps.sql, endpointIds, since),
    readAgentObserved(deps.sql, endpointIds, since),
    readToolObserved(
      deps.sql,
      rows.flatMap((r) => (r.tool === null ? [] : [{ endpointId: r.id, tool: r.tool }])),
      since,
    ),
    Promise.all(rows.map((r) => acceptsOf(deps, r))),
  ])
  const base = deps.publicUrl()
  return {
    x402Version: 2,
    items: rows
      .map((r, i) => {
        const common = {
          resource: `${base}/m/${r.id}`,
          type: r.tool === null ? 'http' : 'mcp',
          x402Version: 2,
          accepts: accepts[i],
          lastUpdated: lastUpdated(r).toISOString(),
          description: describe(r),
          mimeType: 'application/json',
          ...resourceMetadata(r.discovery),
        }
        // What tollgate measured of this endpoint's (or tool's) paid traffic: catalogs list claims, this is evidence.
        if (r.tool === null) {
          const agents = agentObserved.get(r.id)
          const figures = presentObserved(observed.get(r.id), WINDOW_DAYS)
          // An endpoint with identity rules also says who paid: a configured signer's name or "unsigned".
          return {
            ...common,
            observed: agents === undefined ? figures : { ...figures, by_agent: presentAgents(agents) },
          }
        }
        // An MCP tool: one resource URL serves many tools, so a catalog tells them apart by tool name, and the
        // bazaar extension its 402 carries says how to call it.
        return {
          ...common,
          toolName: r.tool,
          extensions: { bazaar: mcpBazaarExtension(toolOf(r)) },
          observed: presentObserved(toolObserved.get(`${r.id}|${r.tool}`), WINDOW_DAYS),
        }
      })
      .concat(facilitated.items as never[]),
    pagination: { limit: f.limit, offset: f.offset, total: total + facilitated.total },
  }
}

/**
 * Resources paid through the facilitator whose payments carried the bazaar extension, as the CDP
 * facilitator's catalog lists them (the resource URL, the terms accepted, the extension echoed), with the
 * figures their settlements give.
 */
async function facilitatorItems(
  deps: DiscoveryDeps,
  f: Parameters<typeof listFacilitatorResources>[1],
  since: Date,
) {
  const { rows, total } = await listFacilitatorResources(deps.sql, f)
  const observed = await readFacilitatorObserved(
    deps.sql,
    rows.map((r) => ({ accountId: r.account_id, url: r.resource_url })),
    since,
  )
  const items = rows.map((r: FacilitatorResourceRow) => ({
    resource: r.resource_url,
    type: r.type,
    x402Version: r.x402_version,
    accepts: r.accepts,
    lastUpdated: r.updated_at.toISOString(),
    ...(r.description === null ? {} : { description: r.description }),
    ...(r.mime_type === null ? {} : { mimeType: r.mime_type }),
    ...(r.service_name === null ? {} : { serviceName: r.service_name }),
    ...(r.tags === null ? {} : { tags: r.tags }),
    ...(r.icon_url === null ? {} : { iconUrl: r.icon_url }),
    extensions: r.extensions,
    observed: presentObserved(observed.get(`${r.account_id}|${r.resource_url}`), WINDOW_DAYS),
  }))
  return { items, total }
}

/** The per-origin manifest: every listed endpoint, its invocation contract lifted out of the bazaar envelope. */
async function manifest(deps: DiscoveryDeps, nowMs: number) {
  const { rows } = await listListedEndpoints(deps.sql, {
    tag: null,
    minPriceAtomic: null,
    maxPriceAtomic: null,
    type: null,
    limit: MANIFEST_MAX,
    offset: 0,
  })
  const accepts = await Promise.all(rows.map((r) => acceptsOf(deps, r)))
  const base = deps.publicUrl()
  let last = 0
  for (const r of rows) last = Math.max(last, lastUpdated(r).getTime())
  return {
    x402Version: 2,
    lastUpdated: Math.floor((last || nowMs) / 1000),
    items: rows.map((r, i) => {
      const resource = {
        url: `${base}/m/${r.id}`,
        description: describe(r),
        mimeType: 'application/json',
        ...resourceMetadata(r.discovery),
      }
      if (r.tool !== null)
        return { resource, type: 'mcp', accepts: accepts[i], input: mcpManifestInput(toolOf(r)) }
      const output = manifestOutput(r.discovery)
      return {
        resource,
        type: 'http',
        accepts: accepts[i],
        input: manifestInput(r.discovery),
        ...(output === undefined ? {} : { output }),
      }
    }),
  }
}

/** What the MPP discovery document and /llms.txt list: every listed endpoint that takes MPP, as one operation. */
async function openApiInput(deps: DiscoveryDeps): Promise<OpenApiInput> {
  const { rows } = await listListedEndpoints(deps.sql, {
    tag: null,
    minPriceAtomic: null,
    maxPriceAtomic: null,
    type: null,
    limit: MANIFEST_MAX,
    offset: 0,
  })
  // An MCP endpoint is listed once per paid tool: one operation (one URL) for all of them.
  const byEndpoint = new Map<string, ListedEndpointRow[]>()
  for (const r of rows) byEndpoint.set(r.id, [...(byEndpoint.get(r.id) ?? []), r])
  const operations = await Promise.all([...byEndpoint.values()].map((g) => payableOperation(deps, g)))
  const base = deps.publicUrl()
  return {
    title: `Metered APIs at ${new URL(base).host}`,
    serverUrl: base,
    operations: operations.filter((o): o is PayableOperation => o !== null),
  }
}

/** A listed endpoint's operation with its MPP offer, from its live 402; null when it does not take MPP. */
async function payableOperation(
  deps: DiscoveryDeps,
  group: ListedEndpointRow[],
): Promise<PayableOperation | null> {
  const r = group[0]!
  const live = await loadEndpoint(deps.endpoints, r.id)
  if (live === NOT_FOUND || !live.active) return null
  const common = {
    path: `/m/${r.id}`,
    summary: r.description ?? r.name ?? `Metered API ${r.id}`,
    discovery: r.discovery,
  }
  if (r.tool !== null) {
    const tools = group.flatMap((t) => {
      const terms = live.bodyPricing?.quoteOf(t.tool!)?.challenge.mpp?.[0]?.terms
      return terms === undefined ? [] : [{ tool: t.tool!, terms }]
    })
    if (tools.length === 0) return null
    const first = tools[0]!.terms
    const one = tools.every((t) => t.terms.amount === first.amount)
    const prices = tools.map((t) => `${t.tool} ${t.terms.amount}`).join(', ')
    return {
      ...common,
      method: 'POST',
      mcp: true,
      offers: [
        {
          intent: first.intent,
          method: first.method,
          amount: one ? first.amount : null,
          currency: first.currency,
          description: `MCP tools/call, priced per tool (base units): ${prices}`,
        },
      ],
    }
  }
  const method = r.discovery?.method ?? 'GET'
  const terms = live.quoteFor(method, '').challenge.mpp?.[0]?.terms
  if (terms === undefined) return null
  const note = PRICING_NOTE[live.pricingModel]
  return {
    ...common,
    method,
    mcp: false,
    offers: [
      {
        intent: terms.intent,
        method: terms.method,
        // Rules price each request by its path and method: the 402 says what this one costs.
        amount: live.pricingModel === 'rules' ? null : terms.amount,
        currency: terms.currency,
        ...(note === undefined ? {} : { description: note }),
      },
    ],
  }
}

const PRICING_NOTE: Record<string, string | undefined> = {
  rules: 'priced by path and method: the 402 names the price of each request',
  usage: 'usage-priced: this ceiling is charged, and what the call did not use is refunded',
}

function describe(r: ListedEndpointRow): string {
  const endpoint = r.description ?? r.name ?? `Metered API ${r.id}`
  if (r.tool === null) return endpoint
  return r.tool_entry?.description ?? `${endpoint} · tool ${r.tool}`
}

/** The list's filters; null when nothing can match (another network, another type). */
function readListQuery(q: URLSearchParams, networks: readonly string[]) {
  for (const key of q.keys()) {
    if (!['limit', 'offset', 'tag', 'network', 'type', 'min_price', 'max_price'].includes(key))
      throw new BadQuery(
        key,
        `unknown parameter ${key} (known: limit, offset, tag, network, type, min_price, max_price)`,
      )
  }
  const limit = intParam(q, 'limit', 20, 1, MAX_LIMIT)
  const offset = intParam(q, 'offset', 0, 0, 1_000_000)
  const tag = q.get('tag')
  if (tag !== null && (tag.length === 0 || tag.length > 32))
    throw new BadQuery('tag', 'tag must be 1 to 32 characters')
  const minPriceAtomic = priceParam(q, 'min_price')
  const maxPriceAtomic = priceParam(q, 'max_price')
  if (minPriceAtomic !== null && maxPriceAtomic !== null && minPriceAtomic > maxPriceAtomic)
    throw new BadQuery('min_price', 'min_price must not be above max_price')
  const network = q.get('network')
  const type = q.get('type')
  if (
    (network !== null && !networks.includes(network)) ||
    (type !== null && type !== 'http' && type !== 'mcp')
  )
    return null
  return { limit, offset, tag, minPriceAtomic, maxPriceAtomic, type: type as 'http' | 'mcp' | null }
}

function intParam(q: URLSearchParams, name: string, fallback: number, min: number, max: number): number {
  const raw = q.get(name)
  if (raw === null) return fallback
  if (!/^\d{1,9}$/.test(raw) || Number(raw) < min || Number(raw) > max)
    throw new BadQuery(name, `${name} must be an integer from ${min} to ${max}`)
  return Number(raw)
}

function priceParam(q: URLSearchParams, name: string): bigint | null {
  const raw = q.get(name)
  if (raw === null) return null
  const parsed = parseDollars(raw)
  if (!parsed.ok) throw new BadQuery(name, `${name} ${parsed.reason}`)
  return parsed.atomic
}
