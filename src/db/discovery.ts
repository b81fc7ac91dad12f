// Queries of the public discovery listing: listed endpoints and their paid MCP tools, the tools MCP servers
// listed, and the hourly figures paid traffic left.
import type { StoredDiscovery } from '../discovery/listing.ts'
import type { ObservedRow } from '../discovery/observed.ts'
import type { CatalogTool } from '../mcp/tool-catalog.ts'
import { ENDPOINT_CHANGED_CHANNEL } from './endpoints.ts'
import type { Sql } from './sql.ts'

/** One item of the listing: a listed endpoint (tool null), or one paid tool of a listed MCP endpoint. */
export interface ListedEndpointRow {
  id: string
  name: string | null
  description: string | null
  price_atomic: bigint
  pricing: unknown
  batch_settlement: boolean
  discovery: StoredDiscovery | null
  updated_at: Date
  /** The paid MCP tool this item is (null: the endpoint itself, kind http). */
  tool: string | null
  /** The tool as its server last listed it (null: not listed by the server yet). */
  tool_entry: CatalogTool | null
  /** When the server's tools/list was last kept (null: never). */
  catalog_seen_at: Date | null
}

export interface ListedFilter {
  tag: string | null
  minPriceAtomic: bigint | null
  maxPriceAtomic: bigint | null
  /** http: endpoints only; mcp: paid MCP tools only; null: both. */
  type: 'http' | 'mcp' | null
  limit: number
  offset: number
}

/**
 * The listing's items, in SQL so that paging stays in the database: a listed endpoint of kind http is one
 * item; one of kind mcp is one item per paid tool, the tools it prices (mcp.tools) and the tools its server
 * listed that cost the default price (neither free nor free as unknown). An MCP endpoint with no paid tool
 * lists nothing. The price filters read the item's headline price: the endpoint's (fixed price, rules'
 * default, usage ceiling), or the tool's (its fixed price, its usage ceiling, or the default price).
 */
const ITEMS = (sql: Sql, f: ListedFilter) => sql`
  SELECT e.id, e.name, e.description, e.price_atomic, e.pricing, e.batch_settlement, e.discovery, e.updated_at,
         e.created_at, t.tool,
         CASE WHEN t.tool IS NULL THEN e.price_atomic
              ELSE coalesce(e.mcp->'tools'->t.tool->>'price_atomic', e.mcp->'tools'->t.tool->>'max_atomic',
                            e.mcp->>'default_atomic')::bigint END AS item_price
  FROM endpoints e
  CROSS JOIN LATERAL (
    SELECT NULL::text AS tool WHERE e.mcp IS NULL
    UNION
    SELECT k FROM jsonb_object_keys(e.mcp->'tools') k
    UNION
    SELECT c->>'name' FROM mcp_tool_catalogs mc, jsonb_array_elements(mc.tools) c
    WHERE e.mcp IS NOT NULL AND mc.endpoint_id = e.id
      AND NOT coalesce((e.mcp->>'unknown_tools_free')::boolean, false)
      AND NOT coalesce(e.mcp->'free_tools', '[]'::jsonb) ? (c->>'name')
  ) t
  WHERE e.listed AND e.deleted_at IS NULL AND e.status = 'active'
  ${f.tag === null ? sql`` : sql`AND e.discovery->'tags' @> ${sql.json([f.tag])}`}
  ${f.type === null ? sql`` : f.type === 'http' ? sql`AND e.mcp IS NULL` : sql`AND e.mcp IS NOT NULL`}`

const PRICED = (sql: Sql, f: ListedFilter) => sql`
  WHERE true
  ${f.minPriceAtomic === null ? sql`` : sql`AND item_price >= ${f.minPriceAtomic}`}
  ${f.maxPriceAtomic === null ? sql`` : sql`AND item_price <= ${f.maxPriceAtomic}`}`

export async function listListedEndpoints(
  sql: Sql,
  f: ListedFilter,
): Promise<{ rows: ListedEndpointRow[]; total: number }> {
  const [rows, [count]] = await Promise.all([
    sql<ListedEndpointRow[]>`
      SELECT i.id, i.name, i.description, i.price_atomic, i.pricing, i.batch_settlement, i.discovery,
             i.updated_at, i.tool, mc.seen_at AS catalog_seen_at,
             (SELECT c FROM jsonb_array_elements(mc.tools) c WHERE c->>'name' = i.tool LIMIT 1) AS tool_entry
      FROM (${ITEMS(sql, f)}) i
      LEFT JOIN mcp_tool_catalogs mc ON i.tool IS NOT NULL AND mc.endpoint_id = i.id
      ${PRICED(sql, f)}
      ORDER BY i.created_at, i.id, i.tool NULLS FIRST
      LIMIT ${f.limit} OFFSET ${f.offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n FROM (${ITEMS(sql, f)}) i ${PRICED(sql, f)}`,
  ])
  return { rows, total: count!.n }
}

/** The tools an MCP server listed, as kept for discovery (src/mcp/tool-catalog.ts). */
export async function findToolCatalog(sql: Sql, endpointId: string): Promise<CatalogTool[] | null> {
  const [row] = await sql<{ tools: CatalogTool[] }[]>`
    SELECT tools FROM mcp_tool_catalogs WHERE endpoint_id = ${endpointId}`
  return row?.tools ?? null
}

/**
 * Keeps what a server's tools/list said, and tells every instance the endpoint changed (its 402s describe
 * each tool with it).
 */
export async function saveToolCatalog(sql: Sql, endpointId: string, tools: CatalogTool[]): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`
      INSERT INTO mcp_tool_catalogs (endpoint_id, tools, seen_at)
      VALUES (${endpointId}, ${tx.json(tools as never)}, now())
      ON CONFLICT (endpoint_id) DO UPDATE SET tools = excluded.tools, seen_at = excluded.seen_at`
    await tx`SELECT pg_notify(${ENDPOINT_CHANGED_CHANNEL}, ${endpointId})`
  })
}

/** One instance's counts since its last flush, added to the hour they fell in. */
export interface HourlyDelta {
  endpointId: string
  /** An MCP tool's own counts (tool_hourly); null: the endpoint's (endpoint_hourly). */
  tool: string | null
  hour: Date
  paidCalls: number
  succeeded: number
  unserved: number
  latencyBuckets: number[]
}

export interface PayerDelta {
  endpointId: string
  tool: string | null
  day: string
  payer: string
  calls: number
}

/** Paid calls to an endpoint with identity rules by who called (a configured signer or "unsigned"), per hour. */
export interface AgentDelta {
  endpointId: string
  signer: string
  hour: Date
  paidCalls: number
  succeeded: number
}

export interface Delivered {
  receiptId: string
  bodySha256: string
  bodyBytes: number
  /**
   * When the answer was delivered, taken once in memory: a retried flush writes the same (receipt, time)
   * into the same month partition, where ON CONFLICT finds it (migration 0041).
   */
  deliveredAt: Date
}

/** Adds the deltas (every instance adds its own; nothing is read back). */
export async function addObserved(
  sql: Sql,
  hours: HourlyDelta[],
  payers: PayerDelta[],
  delivered: Delivered[] = [],
  agents: AgentDelta[] = [],
): Promise<void> {
  await sql.begin(async (tx) => {
    // One statement for every signer's hour of the flush (only endpoints with identity rules have any).
    if (agents.length > 0) {
      await tx`
        INSERT INTO endpoint_agent_hourly (endpoint_id, signer, hour, paid_calls, succeeded)
        SELECT * FROM unnest(${agents.map((a) => a.endpointId)}::text[], ${agents.map((a) => a.signer)}::text[],
                             ${agents.map((a) => a.hour.toISOString())}::timestamptz[],
                             ${agents.map((a) => a.paidCalls)}::bigint[], ${agents.map((a) => a.succeeded)}::bigint[])
        ON CONFLICT (endpoint_id, hour, signer) DO UPDATE SET
          paid_calls = endpoint_agent_hourly.paid_calls + excluded.paid_calls,
          succeeded = endpoint_agent_hourly.succeeded + excluded.succeeded`
    }
    // One statement for the flush's deliveries (one a paid answer: a statement each cost PostgreSQL a round
    // trip and a plan execution per call).
    if (delivered.length > 0) {
      await tx`
        INSERT INTO call_deliveries (receipt_id, body_sha256, body_bytes, created_at)
        SELECT * FROM unnest(${delivered.map((d) => d.receiptId)}::text[],
                             ${delivered.map((d) => d.bodySha256)}::text[],
                             ${delivered.map((d) => d.bodyBytes)}::bigint[],
                             ${delivered.map((d) => d.deliveredAt.toISOString())}::timestamptz[])
        ON CONFLICT (receipt_id, created_at) DO NOTHING`
    }
    for (const h of hours) {
      if (h.tool !== null) {
        await tx`
          INSERT INTO tool_hourly (endpoint_id, tool, hour, paid_calls, succeeded, unserved, latency_buckets)
          VALUES (${h.endpointId}, ${h.tool}, ${h.hour}, ${h.paidCalls}, ${h.succeeded}, ${h.unserved},
                  ${h.latencyBuckets}::bigint[])
          ON CONFLICT (endpoint_id, tool, hour) DO UPDATE SET
            paid_calls = tool_hourly.paid_calls + excluded.paid_calls,
            succeeded = tool_hourly.succeeded + excluded.succeeded,
            unserved = tool_hourly.unserved + excluded.unserved,
            latency_buckets = ARRAY(
              SELECT coalesce(a, 0) + coalesce(b, 0)
              FROM unnest(tool_hourly.latency_buckets, excluded.latency_buckets) WITH ORDINALITY AS t(a, b, i)
              ORDER BY i)`
        continue
      }
      await tx`
        INSERT INTO endpoint_hourly (endpoint_id, hour, paid_calls, succeeded, unserved, latency_buckets)
        VALUES (${h.endpointId}, ${h.hour}, ${h.paidCalls}, ${h.succeeded}, ${h.unserved},
                ${h.latencyBuckets}::bigint[])
        ON CONFLICT (endpoint_id, hour) DO UPDATE SET
          paid_calls = endpoint_hourly.paid_calls + excluded.paid_calls,
          succeeded = endpoint_hourly.succeeded + excluded.succeeded,
          unserved = endpoint_hourly.unserved + excluded.unserved,
          latency_buckets = ARRAY(
            SELECT coalesce(a, 0) + coalesce(b, 0)
            FROM unnest(endpoint_hourly.latency_buckets, excluded.latency_buckets) WITH ORDINALITY AS t(a, b, i)
            ORDER BY i)`
    }
    for (const p of payers) {
      if (p.tool !== null) {
        await tx`
          INSERT INTO tool_payer_days (endpoint_id, tool, day, payer, calls)
          VALUES (${p.endpointId}, ${p.tool}, ${p.day}, ${p.payer}, ${p.calls})
          ON CONFLICT (endpoint_id, tool, day, payer) DO UPDATE SET calls = tool_payer_days.calls + excluded.calls`
        continue
      }
      await tx`
        INSERT INTO endpoint_payer_days (endpoint_id, day, payer, calls)
        VALUES (${p.endpointId}, ${p.day}, ${p.payer}, ${p.calls})
        ON CONFLICT (endpoint_id, day, payer) DO UPDATE SET calls = endpoint_payer_days.calls + excluded.calls`
    }
  })
}

/**
 * The window's figures of the given endpoints: at most 24 × days hourly rows each, and their payers of the
 * window, never the call history.
 */
export async function readObserved(
  sql: Sql,
  endpointIds: string[],
  since: Date,
): Promise<Map<string, ObservedRow>> {
  const out = new Map<string, ObservedRow>()
  if (endpointIds.length === 0) return out
  const hours = await sql<
    { endpoint_id: string; paid: string; ok: string; unserved: string; buckets: string[] }[]
  >`
    SELECT h.endpoint_id, sum(h.paid_calls)::text AS paid, sum(h.succeeded)::text AS ok,
           sum(h.unserved)::text AS unserved,
           ARRAY(SELECT sum(x)::text FROM endpoint_hourly h2, unnest(h2.latency_buckets) WITH ORDINALITY AS u(x, i)
                 WHERE h2.endpoint_id = h.endpoint_id AND h2.hour >= ${since}
                 GROUP BY i ORDER BY i) AS buckets
    FROM endpoint_hourly h
    WHERE h.endpoint_id = ANY(${endpointIds}) AND h.hour >= ${since}
    GROUP BY h.endpoint_id`
  const repeat = await sql<{ endpoint_id: string; n: number }[]>`
    SELECT endpoint_id, count(*)::int AS n FROM (
      SELECT endpoint_id, payer FROM endpoint_payer_days
      WHERE endpoint_id = ANY(${endpointIds}) AND day >= ${since.toISOString().slice(0, 10)}::date
      GROUP BY endpoint_id, payer HAVING sum(calls) >= 2) r
    GROUP BY endpoint_id`
  const repeatBy = new Map(repeat.map((r) => [r.endpoint_id, r.n]))
  for (const h of hours) {
    out.set(h.endpoint_id, {
      paid_calls: Number(h.paid),
      succeeded: Number(h.ok),
      unserved: Number(h.unserved),
      latency_buckets: h.buckets.map(Number),
      repeat_payers: repeatBy.get(h.endpoint_id) ?? 0,
    })
  }
  return out
}

/**
 * The window's figures of the given MCP tools (endpoint id and tool name), keyed `endpoint|tool`: as
 * readObserved, from the tools' own hourly rows.
 */
export async function readToolObserved(
  sql: Sql,
  tools: Array<{ endpointId: string; tool: string }>,
  since: Date,
): Promise<Map<string, ObservedRow>> {
  const out = new Map<string, ObservedRow>()
  if (tools.length === 0) return out
  const ids = tools.map((t) => t.endpointId)
  const names = tools.map((t) => t.tool)
  const hours = await sql<
    { endpoint_id: string; tool: string; paid: string; ok: string; unserved: string; buckets: string[] }[]
  >`
    SELECT h.endpoint_id, h.tool, sum(h.paid_calls)::text AS paid, sum(h.succeeded)::text AS ok,
           sum(h.unserved)::text AS unserved,
           ARRAY(SELECT sum(x)::text FROM tool_hourly h2, unnest(h2.latency_buckets) WITH ORDINALITY AS u(x, i)
                 WHERE h2.endpoint_id = h.endpoint_id AND h2.tool = h.tool AND h2.hour >= ${since}
                 GROUP BY i ORDER BY i) AS buckets
    FROM tool_hourly h
    JOIN unnest(${ids}::text[], ${names}::text[]) AS w(endpoint_id, tool)
      ON w.endpoint_id = h.endpoint_id AND w.tool = h.tool
    WHERE h.hour >= ${since}
    GROUP BY h.endpoint_id, h.tool`
  const repeat = await sql<{ endpoint_id: string; tool: string; n: number }[]>`
    SELECT endpoint_id, tool, count(*)::int AS n FROM (
      SELECT d.endpoint_id, d.tool, d.payer FROM tool_payer_days d
      JOIN unnest(${ids}::text[], ${names}::text[]) AS w(endpoint_id, tool)
        ON w.endpoint_id = d.endpoint_id AND w.tool = d.tool
      WHERE d.day >= ${since.toISOString().slice(0, 10)}::date
      GROUP BY d.endpoint_id, d.tool, d.payer HAVING sum(d.calls) >= 2) r
    GROUP BY endpoint_id, tool`
  const repeatBy = new Map(repeat.map((r) => [`${r.endpoint_id}|${r.tool}`, r.n]))
  for (const h of hours) {
    const key = `${h.endpoint_id}|${h.tool}`
    out.set(key, {
      paid_calls: Number(h.paid),
      succeeded: Number(h.ok),
      unserved: Number(h.unserved),
      latency_buckets: h.buckets.map(Number),
      repeat_payers: repeatBy.get(key) ?? 0,
    })
  }
  return out
}

/** Hourly and daily rows older than the window serve no listing; retention drops them. */
export async function pruneObserved(sql: Sql, before: Date): Promise<void> {
  const day = before.toISOString().slice(0, 10)
  await sql`DELETE FROM endpoint_hourly WHERE hour < ${before}`
  await sql`DELETE FROM endpoint_payer_days WHERE day < ${day}::date`
  await sql`DELETE FROM tool_hourly WHERE hour < ${before}`
  await sql`DELETE FROM tool_payer_days WHERE day < ${day}::date`
  await sql`DELETE FROM endpoint_agent_hourly WHERE hour < ${before}`
}

/** One signer's paid calls to an endpoint over the window. */
export interface AgentObservedRow {
  signer: string
  paid_calls: number
  succeeded: number
}

/**
 * The window's paid calls of the given endpoints split by who called (endpoints with identity rules; others
 * have no rows), busiest signer first: at most 24 × days rows per signer, never the call history.
 */
export async function readAgentObserved(
  sql: Sql,
  endpointIds: string[],
  since: Date,
): Promise<Map<string, AgentObservedRow[]>> {
  const out = new Map<string, AgentObservedRow[]>()
  if (endpointIds.length === 0) return out
  const rows = await sql<{ endpoint_id: string; signer: string; paid: string; ok: string }[]>`
    SELECT endpoint_id, signer, sum(paid_calls)::text AS paid, sum(succeeded)::text AS ok
    FROM endpoint_agent_hourly
    WHERE endpoint_id = ANY(${endpointIds}) AND hour >= ${since}
    GROUP BY endpoint_id, signer
    ORDER BY endpoint_id, sum(paid_calls) DESC, signer`
  for (const r of rows) {
    const list = out.get(r.endpoint_id) ?? []
    list.push({ signer: r.signer, paid_calls: Number(r.paid), succeeded: Number(r.ok) })
    out.set(r.endpoint_id, list)
  }
  return out
}

/** A resource cataloged from payments settled through the facilitator (migration 0073). */
export interface FacilitatorResourceRow {
  account_id: string
  resource_url: string
  type: 'http' | 'mcp'
  x402_version: number
  accepts: unknown[]
  extensions: Record<string, unknown>
  description: string | null
  mime_type: string | null
  service_name: string | null
  tags: string[] | null
  icon_url: string | null
  updated_at: Date
}

/** Listed once one of its settlements is mined: a payment that never settled lists nothing. */
const FACILITATED = (sql: Sql, f: ListedFilter) => sql`
  FROM facilitator_resources r
  WHERE EXISTS (SELECT 1 FROM facilitator_settlements s
                WHERE s.account_id = r.account_id AND s.resource_url = r.resource_url AND s.settled_at IS NOT NULL)
  ${f.tag === null ? sql`` : sql`AND r.tags @> ${sql.json([f.tag])}`}
  ${f.type === null ? sql`` : sql`AND r.type = ${f.type}`}
  ${f.minPriceAtomic === null ? sql`` : sql`AND r.price_atomic >= ${f.minPriceAtomic}`}
  ${f.maxPriceAtomic === null ? sql`` : sql`AND r.price_atomic <= ${f.maxPriceAtomic}`}`

/** The facilitator's cataloged resources matching the filters: one page, and how many match in all. */
export async function listFacilitatorResources(
  sql: Sql,
  f: ListedFilter,
): Promise<{ rows: FacilitatorResourceRow[]; total: number }> {
  const [rows, [count]] = await Promise.all([
    f.limit === 0
      ? Promise.resolve([] as FacilitatorResourceRow[])
      : sql<FacilitatorResourceRow[]>`
          SELECT r.account_id, r.resource_url, r.type, r.x402_version, r.accepts, r.extensions, r.description,
                 r.mime_type, r.service_name, r.tags, r.icon_url, r.updated_at
          ${FACILITATED(sql, f)}
          ORDER BY r.created_at, r.account_id, r.resource_url
          LIMIT ${f.limit} OFFSET ${f.offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n ${FACILITATED(sql, f)}`,
  ])
  return { rows, total: count!.n }
}

/**
 * The window's figures of cataloged resources, keyed `account|url`, from the settlements that name them: a
 * mined settlement is a paid call, and one the middleware asked for after its handler answered (it settles
 * only a successful answer); tollgate did not serve it, so no latency and nothing unserved is known.
 */
export async function readFacilitatorObserved(
  sql: Sql,
  resources: Array<{ accountId: string; url: string }>,
  since: Date,
): Promise<Map<string, ObservedRow>> {
  const out = new Map<string, ObservedRow>()
  if (resources.length === 0) return out
  const rows = await sql<{ account_id: string; resource_url: string; paid: number; repeat: number }[]>`
    SELECT p.account_id, p.resource_url, sum(p.n)::int AS paid, count(*) FILTER (WHERE p.n >= 2)::int AS repeat
    FROM (
      SELECT s.account_id, s.resource_url, s.payer, count(*) AS n
      FROM facilitator_settlements s
      JOIN unnest(${resources.map((r) => r.accountId)}::text[], ${resources.map((r) => r.url)}::text[])
        AS w(account_id, url) ON w.account_id = s.account_id AND w.url = s.resource_url
      WHERE s.settled_at IS NOT NULL AND s.created_at >= ${since}
      GROUP BY s.account_id, s.resource_url, s.payer) p
    GROUP BY p.account_id, p.resource_url`
  for (const r of rows)
    out.set(`${r.account_id}|${r.resource_url}`, {
      paid_calls: r.paid,
      succeeded: r.paid,
      unserved: 0,
      latency_buckets: [],
      repeat_payers: r.repeat,
    })
  return out
}
