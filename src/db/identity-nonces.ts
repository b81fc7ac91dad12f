// The once-only table for signature nonces (migration 0068): the primary key is the whole replay check, so
// two instances racing on one replayed signature cannot both accept it.
import type { Sql } from './sql.ts'

/**
 * Records the nonce; true when it was free (first use, or its earlier row has expired). A few expired rows
 * are removed on the way, so the table stays the size of the signature window.
 */
export async function claimNonce(sql: Sql, q: { key: string; expiresAtMs: number }): Promise<boolean> {
  const rows = await sql<Array<{ nonce_key: string }>>`
    WITH pruned AS (
      DELETE FROM identity_nonces WHERE nonce_key IN (
        SELECT nonce_key FROM identity_nonces WHERE expires_at < now() AND nonce_key <> ${q.key} LIMIT 16)
    )
    INSERT INTO identity_nonces (nonce_key, expires_at)
    VALUES (${q.key}, to_timestamp(${q.expiresAtMs} / 1000.0))
    ON CONFLICT (nonce_key) DO UPDATE SET expires_at = EXCLUDED.expires_at
      WHERE identity_nonces.expires_at < now()
    RETURNING nonce_key`
  return rows.length === 1
}
