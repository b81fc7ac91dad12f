// Queries on metered endpoints.
import type { StoredDiscovery } from '../discovery/listing.ts'
import type { StoredIdentityRule } from '../identity/stored-rules.ts'
import type { StoredMcp } from '../mcp/config.ts'
import type { CatalogTool } from '../mcp/tool-catalog.ts'
import type { StoredPricing } from '../pricing/model.ts'
import type { StoredPass } from '../pricing/pass.ts'
import type { StoredWebsocket } from '../pricing/session.ts'
import { afterCursor } from './cursor.ts'
import type { Sql, Tx } from './sql.ts'

/** before_answer: the answer's head waits for the mined settlement; after: settled in the leader's batches. */
export type X402Settlement = 'before_answer' | 'after'

export interface EndpointRow {
  id: string
  account_id: string
  name: string | null
  description: string | null
  upstream_url: string
  upstream_headers: Record<string, string>
  price_atomic: bigint
  quote_floor_atomic: bigint | null
  quote_floor_until: Date | null
  timeout_ms: number | null
  /** x402 batch-settlement offered; off by default. */
  batch_settlement: boolean
  /** null: one fixed price (price_atomic). */
  pricing: StoredPricing | null
  /** In the public discovery listing and the bazaar extension of its 402. */
  listed: boolean
  discovery: StoredDiscovery | null
  /** An MCP endpoint's per-tool prices; null for an HTTP endpoint. */
  mcp: StoredMcp | null
  /** The pass it sells (N calls, T seconds, or both, at a price); null: none. */
  pass: StoredPass | null
  /** When an x402 `exact` authorization is settled; null: the process default (settlement.before_answer). */
  x402_settlement: X402Settlement | null
  /** The payment protocols answered besides a transaction hash ('x402', 'mpp'); both by default. */
  protocols: string[]
  /** Prices by verified agent identity (docs/agent-identity.md); null: none, no signature is read. */
  identity_rules: StoredIdentityRule[] | null
  /** WebSocket sessions on its metered URL (docs/websockets.md); null: an upgrade is refused. */
  websocket: StoredWebsocket | null
  status: 'active' | 'disabled'
  version: number
  created_at: Date
  updated_at: Date
}

const COLUMNS =
  'id, account_id, name, description, upstream_url, upstream_headers, price_atomic, quote_floor_atomic, quote_floor_until, timeout_ms, batch_settlement, pricing, listed, discovery, mcp, pass, x402_settlement, protocols, identity_rules, websocket, status, version, created_at, updated_at'

/** The channel that tells every instance an endpoint changed (payload: its id). */
export const ENDPOINT_CHANGED_CHANNEL = 'tollgate_endpoint_changed'

export async function insertEndpoint(
  db: Sql | Tx,
  e: {
    id: string
    accountId: string
    name: string | null
    description: string | null
    upstreamUrl: string
    upstreamHeaders: Record<string, string>
    priceAtomic: bigint
    timeoutMs: number | null
    batchSettlement?: boolean
    pricing?: StoredPricing | null
    listed?: boolean
    discovery?: StoredDiscovery | null
    mcp?: StoredMcp | null
    pass?: StoredPass | null
    x402Settlement?: X402Settlement | null
    protocols?: string[]
    identityRules?: StoredIdentityRule[] | null
    websocket?: StoredWebsocket | null
  },
): Promise<EndpointRow> {
  const pricing = e.pricing ? db.json(e.pricing as never) : null
  const discovery = e.discovery ? db.json(e.discovery as never) : null
  const mcp = e.mcp ? db.json(e.mcp as never) : null
  const pass = e.pass ? db.json(e.pass as never) : null
  const identityRules = e.identityRules ? db.json(e.identityRules as never) : null
  const websocket = e.websocket ? db.json(e.websocket as never) : null
  const [row] = await db<EndpointRow[]>`
    INSERT INTO endpoints (id, account_id, name, description, upstream_url, upstream_headers, price_atomic, timeout_ms,
                           batch_settlement, pricing, listed, discovery, mcp, pass, x402_settlement, protocols,
                           identity_rules, websocket)
    VALUES (${e.id}, ${e.accountId}, ${e.name}, ${e.description}, ${e.upstreamUrl},
            ${db.json(e.upstreamHeaders)}, ${e.priceAtomic}, ${e.timeoutMs}, ${e.batchSettlement ?? false},
            ${pricing}, ${e.listed ?? false}, ${discovery}, ${mcp}, ${pass}, ${e.x402Settlement ?? null},
            ${e.protocols ?? ['x402', 'mpp']}::text[], ${identityRules}, ${websocket})
    RETURNING ${db.unsafe(COLUMNS)}`
  return row!
}

/** An owner's endpoint (not deleted); null for another account's id, so callers answer 404 either way. */
export async function findOwnedEndpoint(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<EndpointRow | null> {
  const [row] = await db<EndpointRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM endpoints
    WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL`
  return row ?? null
}

/** The endpoint as the data plane needs it, with the owner's payout wallet; null if unknown or deleted. */
export interface LiveEndpointRow extends EndpointRow {
  owner_wallet: string
  /** A listed MCP endpoint: the tools its server last listed (null: none kept, or not listed). */
  mcp_catalog?: CatalogTool[] | null
}

export async function findLiveEndpoint(db: Sql | Tx, id: string): Promise<LiveEndpointRow | null> {
  const [row] = await db<LiveEndpointRow[]>`
    SELECT e.id, e.account_id, e.name, e.description, e.upstream_url, e.upstream_headers, e.price_atomic,
           e.quote_floor_atomic, e.quote_floor_until, e.timeout_ms, e.batch_settlement, e.pricing, e.listed, e.discovery, e.mcp, e.pass, e.x402_settlement, e.protocols, e.identity_rules, e.websocket, e.status,
           e.version, e.created_at,
           e.updated_at, a.wallet_address AS owner_wallet,
           CASE WHEN e.listed AND e.mcp IS NOT NULL
                THEN (SELECT tools FROM mcp_tool_catalogs WHERE endpoint_id = e.id) END AS mcp_catalog
    FROM endpoints e JOIN accounts a ON a.id = e.account_id
    WHERE e.id = ${id} AND e.deleted_at IS NULL`
  return row ?? null
}

export async function listEndpoints(
  db: Sql | Tx,
  q: { accountId: string; limit: number; startingAfter: string | null },
): Promise<EndpointRow[]> {
  return db<EndpointRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM endpoints
    WHERE account_id = ${q.accountId} AND deleted_at IS NULL
    ${afterCursor(db, 'endpoints', q.startingAfter, q.accountId)}
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
}

export interface EndpointChanges {
  name?: string | null
  description?: string | null
  upstreamUrl?: string
  upstreamHeaders?: Record<string, string>
  priceAtomic?: bigint
  status?: 'active' | 'disabled'
  timeoutMs?: number | null
  batchSettlement?: boolean
  /** Replaces the pricing (null: one fixed price); the caller sets priceAtomic to its headline price. */
  pricing?: StoredPricing | null
  listed?: boolean
  /** Replaces what the owner declared for discovery (null: nothing). */
  discovery?: StoredDiscovery | null
  /** Replaces the MCP document (null: an HTTP endpoint again). */
  mcp?: StoredMcp | null
  /** Replaces the pass it sells (null: none; passes already bought stay valid). */
  pass?: StoredPass | null
  /** null: back to the process default. */
  x402Settlement?: X402Settlement | null
  /** The payment protocols answered besides a transaction hash. */
  protocols?: string[]
  /** Replaces the identity rules (null: none). */
  identityRules?: StoredIdentityRule[] | null
  /** Replaces the WebSocket session terms (null: upgrades refused). */
  websocket?: StoredWebsocket | null
}

/**
 * Applies changes and bumps the version. A price change keeps the lowest price quoted in the last
 * quoteTtlMs as a floor, so callers who paid what they were quoted are not refused.
 */
export async function updateEndpoint(
  db: Sql | Tx,
  current: EndpointRow,
  changes: EndpointChanges,
  quoteTtlMs: number,
): Promise<EndpointRow> {
  const set: Record<string, unknown> = { updated_at: new Date(), version: current.version + 1 }
  if (changes.name !== undefined) set.name = changes.name
  if (changes.description !== undefined) set.description = changes.description
  if (changes.upstreamUrl !== undefined) set.upstream_url = changes.upstreamUrl
  if (changes.upstreamHeaders !== undefined) set.upstream_headers = db.json(changes.upstreamHeaders)
  if (changes.status !== undefined) set.status = changes.status
  if (changes.timeoutMs !== undefined) set.timeout_ms = changes.timeoutMs
  if (changes.batchSettlement !== undefined) set.batch_settlement = changes.batchSettlement
  if (changes.listed !== undefined) set.listed = changes.listed
  if (changes.discovery !== undefined)
    set.discovery = changes.discovery === null ? null : db.json(changes.discovery as never)
  if (changes.pricing !== undefined)
    set.pricing = changes.pricing === null ? null : db.json(changes.pricing as never)
  if (changes.x402Settlement !== undefined) set.x402_settlement = changes.x402Settlement
  if (changes.protocols !== undefined) set.protocols = changes.protocols
  if (changes.identityRules !== undefined)
    set.identity_rules = changes.identityRules === null ? null : db.json(changes.identityRules as never)
  if (changes.websocket !== undefined)
    set.websocket = changes.websocket === null ? null : db.json(changes.websocket as never)
  if (changes.mcp !== undefined) set.mcp = changes.mcp === null ? null : db.json(changes.mcp as never)
  if (changes.pass !== undefined) set.pass = changes.pass === null ? null : db.json(changes.pass as never)
  if (changes.priceAtomic !== undefined && changes.priceAtomic !== current.price_atomic) {
    set.price_atomic = changes.priceAtomic
    const floorStillHolds =
      current.quote_floor_until !== null && current.quote_floor_until.getTime() > Date.now()
    const prevFloor = floorStillHolds ? current.quote_floor_atomic! : current.price_atomic
    // bigint: Math.min would coerce to a float.
    const floor = prevFloor < current.price_atomic ? prevFloor : current.price_atomic
    set.quote_floor_atomic = floor
    set.quote_floor_until = new Date(Date.now() + quoteTtlMs)
  }
  const [row] = await db<EndpointRow[]>`
    UPDATE endpoints SET ${db(set as Record<string, never>)}
    WHERE id = ${current.id} AND deleted_at IS NULL
    RETURNING ${db.unsafe(COLUMNS)}`
  await db`SELECT pg_notify(${ENDPOINT_CHANGED_CHANNEL}, ${current.id})`
  return row!
}

export async function deleteEndpoint(db: Sql | Tx, accountId: string, id: string): Promise<boolean> {
  const rows = await db`
    UPDATE endpoints SET deleted_at = now(), status = 'disabled', version = version + 1, updated_at = now()
    WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL
    RETURNING id`
  await db`SELECT pg_notify(${ENDPOINT_CHANGED_CHANNEL}, ${id})`
  return rows.length === 1
}
