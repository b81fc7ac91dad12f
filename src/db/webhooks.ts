// Queries on webhook endpoints (the merchant's receivers) and their signing secrets.
import { afterCursor } from './cursor.ts'
import type { Sql, Tx } from './sql.ts'

export interface WebhookRow {
  id: string
  account_id: string
  url: string
  /** Event types, or ['*'] for all of them (types added later included). */
  events: string[]
  secret: string
  previous_secret: string | null
  previous_secret_expires_at: Date | null
  status: 'enabled' | 'disabled'
  disabled_reason: string | null
  failing_since: Date | null
  created_at: Date
}

const COLUMNS =
  'id, account_id, url, events, secret, previous_secret, previous_secret_expires_at, status, disabled_reason, failing_since, created_at'

export async function insertWebhook(
  db: Sql | Tx,
  w: { id: string; accountId: string; url: string; events: string[]; secret: string },
): Promise<WebhookRow> {
  const [row] = await db<WebhookRow[]>`
    INSERT INTO webhooks (id, account_id, url, events, secret)
    VALUES (${w.id}, ${w.accountId}, ${w.url}, ${w.events}, ${w.secret})
    RETURNING ${db.unsafe(COLUMNS)}`
  return row!
}

/** An account's webhook (not deleted); null for another account's id, so callers answer 404 either way. */
export async function findOwnedWebhook(
  db: Sql | Tx,
  accountId: string,
  id: string,
): Promise<WebhookRow | null> {
  const [row] = await db<WebhookRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM webhooks
    WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL`
  return row ?? null
}

export async function listWebhooks(
  db: Sql | Tx,
  q: { accountId: string; limit: number; startingAfter: string | null },
): Promise<WebhookRow[]> {
  return db<WebhookRow[]>`
    SELECT ${db.unsafe(COLUMNS)} FROM webhooks
    WHERE account_id = ${q.accountId} AND deleted_at IS NULL
    ${afterCursor(db, 'webhooks', q.startingAfter, q.accountId)}
    ORDER BY created_at DESC, id DESC
    LIMIT ${q.limit}`
}

export interface WebhookChanges {
  url?: string
  events?: string[]
  status?: 'enabled' | 'disabled'
}

export async function updateWebhook(
  db: Sql | Tx,
  q: { accountId: string; id: string; changes: WebhookChanges },
): Promise<WebhookRow | null> {
  const c = q.changes
  const [row] = await db<WebhookRow[]>`
    UPDATE webhooks SET
      url = COALESCE(${c.url ?? null}, url),
      events = COALESCE(${c.events ?? null}::text[], events),
      status = COALESCE(${c.status ?? null}, status),
      -- Re-enabling starts with a clean record: the failure clock restarts and the reason goes.
      disabled_reason = CASE WHEN ${c.status ?? null}::text = 'enabled' THEN NULL ELSE disabled_reason END,
      failing_since = CASE WHEN ${c.status ?? null}::text = 'enabled' THEN NULL ELSE failing_since END
    WHERE id = ${q.id} AND account_id = ${q.accountId} AND deleted_at IS NULL
    RETURNING ${db.unsafe(COLUMNS)}`
  return row ?? null
}

/** The current secret becomes the previous one, signing alongside the new one until overlapMs from now. */
export async function rotateWebhookSecret(
  db: Sql | Tx,
  q: { accountId: string; id: string; secret: string; overlapMs: number },
): Promise<WebhookRow | null> {
  const [row] = await db<WebhookRow[]>`
    UPDATE webhooks SET previous_secret = secret, secret = ${q.secret},
      previous_secret_expires_at = now() + ${q.overlapMs} * interval '1 millisecond'
    WHERE id = ${q.id} AND account_id = ${q.accountId} AND deleted_at IS NULL
    RETURNING ${db.unsafe(COLUMNS)}`
  return row ?? null
}

/** Soft delete (attempts keep their history); its pending deliveries will never be sent. */
export async function deleteWebhook(db: Tx, accountId: string, id: string): Promise<boolean> {
  const deleted = await db`
    UPDATE webhooks SET deleted_at = now(), status = 'disabled', disabled_reason = 'deleted'
    WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL RETURNING id`
  if (deleted.length === 0) return false
  await db`UPDATE webhook_deliveries SET status = 'failed', locked_until = NULL
           WHERE webhook_id = ${id} AND status = 'pending'`
  return true
}
