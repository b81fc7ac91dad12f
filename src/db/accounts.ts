// Queries on accounts and api_keys.
import type { Sql, Tx } from './sql.ts'

export interface AccountRow {
  id: string
  wallet_address: string
  business_name: string
  mode: 'test' | 'live'
  created_at: Date
}

export async function insertAccount(
  db: Sql | Tx,
  a: { id: string; walletAddress: string; businessName: string; mode: 'test' | 'live' },
): Promise<AccountRow> {
  const [row] = await db<AccountRow[]>`
    INSERT INTO accounts (id, wallet_address, business_name, mode)
    VALUES (${a.id}, ${a.walletAddress}, ${a.businessName}, ${a.mode})
    RETURNING id, wallet_address, business_name, mode, created_at`
  return row!
}

export async function insertApiKey(
  db: Sql | Tx,
  k: { id: string; accountId: string; keyHash: Buffer; hint: string },
): Promise<void> {
  await db`INSERT INTO api_keys (id, account_id, key_hash, hint) VALUES (${k.id}, ${k.accountId}, ${k.keyHash}, ${k.hint})`
}

/** The account whose live (unexpired) key has this hash, and how long that key stays live (null: no end). */
export async function findAccountByKeyHash(
  db: Sql | Tx,
  keyHash: Buffer,
): Promise<{ account: AccountRow; expiresInMs: number | null } | null> {
  const [row] = await db<(AccountRow & { expires_in_ms: number | null })[]>`
    SELECT a.id, a.wallet_address, a.business_name, a.mode, a.created_at,
           (extract(epoch FROM k.expires_at - now()) * 1000)::float8 AS expires_in_ms
    FROM api_keys k JOIN accounts a ON a.id = k.account_id
    WHERE k.key_hash = ${keyHash} AND (k.expires_at IS NULL OR k.expires_at > now())`
  if (!row) return null
  const { expires_in_ms, ...account } = row
  return { account, expiresInMs: expires_in_ms }
}

/** Every other current key of the account expires after graceMs (0 → now). Returns that time. */
export async function expireOtherKeys(
  db: Sql | Tx,
  accountId: string,
  keepId: string,
  graceMs: number,
): Promise<Date> {
  const [row] = await db<{ at: Date }[]>`
    UPDATE api_keys SET expires_at = now() + ${graceMs} * interval '1 millisecond'
    WHERE account_id = ${accountId} AND id <> ${keepId}
      AND (expires_at IS NULL OR expires_at > now() + ${graceMs} * interval '1 millisecond')
    RETURNING expires_at AS at`
  if (row) return row.at
  const [now] = await db<{ at: Date }[]>`SELECT now() + ${graceMs} * interval '1 millisecond' AS at`
  return now!.at
}
