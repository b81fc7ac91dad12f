// Queries on dashboard_sessions (sign-in by API key, cookie sessions, logout). Times are the database's.
import type { AccountRow } from './accounts.ts'
import type { Sql, Tx } from './sql.ts'

export interface SessionRow {
  account: AccountRow
  key_id: string
  expires_at: Date
}

/** The account and key id of a live (unexpired) API key with this hash. */
export async function findLiveKey(
  db: Sql | Tx,
  keyHash: Buffer,
): Promise<{ account: AccountRow; keyId: string } | null> {
  const [row] = await db<(AccountRow & { key_id: string })[]>`
    SELECT a.id, a.wallet_address, a.business_name, a.mode, a.created_at, k.id AS key_id
    FROM api_keys k JOIN accounts a ON a.id = k.account_id
    WHERE k.key_hash = ${keyHash} AND (k.expires_at IS NULL OR k.expires_at > now())`
  if (!row) return null
  const { key_id, ...account } = row
  return { account, keyId: key_id }
}

export async function insertSession(
  db: Sql | Tx,
  s: { tokenHash: Buffer; accountId: string; keyId: string; ttlMs: number; userAgent: string | null },
): Promise<Date> {
  const [row] = await db<{ expires_at: Date }[]>`
    INSERT INTO dashboard_sessions (token_hash, account_id, key_id, expires_at, user_agent)
    VALUES (${s.tokenHash}, ${s.accountId}, ${s.keyId}, now() + ${s.ttlMs} * interval '1 millisecond',
            ${s.userAgent})
    RETURNING expires_at`
  return row!.expires_at
}

export type SessionLookup = { ok: true; session: SessionRow } | { ok: false; reason: 'unknown' | 'expired' }

/**
 * A session counts while it is unrevoked, unexpired, and the key it was opened with still works: rolling
 * a key (past its grace period) ends the sessions opened with the old one.
 */
export async function findSession(db: Sql | Tx, tokenHash: Buffer): Promise<SessionLookup> {
  const [row] = await db<
    (AccountRow & { key_id: string; expires_at: Date; live: boolean; revoked: boolean })[]
  >`
    SELECT a.id, a.wallet_address, a.business_name, a.mode, a.created_at, s.key_id, s.expires_at,
           (s.expires_at > now() AND (k.expires_at IS NULL OR k.expires_at > now())) AS live,
           (s.revoked_at IS NOT NULL) AS revoked
    FROM dashboard_sessions s
    JOIN accounts a ON a.id = s.account_id
    JOIN api_keys k ON k.id = s.key_id
    WHERE s.token_hash = ${tokenHash}`
  if (!row || row.revoked) return { ok: false, reason: 'unknown' }
  if (!row.live) return { ok: false, reason: 'expired' }
  const { key_id, expires_at, live: _live, revoked: _revoked, ...account } = row
  return { ok: true, session: { account, key_id, expires_at } }
}

/** Logout: the session stops working now. Returns whether a live session was revoked. */
export async function revokeSession(db: Sql | Tx, tokenHash: Buffer): Promise<boolean> {
  const rows = await db`
    UPDATE dashboard_sessions SET revoked_at = now()
    WHERE token_hash = ${tokenHash} AND revoked_at IS NULL`
  return rows.count > 0
}

/** The account's sessions that ended (expired or revoked) more than retentionMs ago are deleted. */
export async function pruneEndedSessions(
  db: Sql | Tx,
  accountId: string,
  retentionMs: number,
): Promise<number> {
  const rows = await db`
    DELETE FROM dashboard_sessions
    WHERE account_id = ${accountId}
      AND (expires_at < now() - ${retentionMs} * interval '1 millisecond'
           OR revoked_at < now() - ${retentionMs} * interval '1 millisecond')`
  return rows.count
}
