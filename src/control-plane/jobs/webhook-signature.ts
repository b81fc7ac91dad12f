// Standard Webhooks signing: `v1,` + base64 HMAC-SHA256 over "id.timestamp.body", keyed with the
// base64-decoded part of the secret after `whsec_` (the prefix is not part of the key).
import { createHmac, randomBytes } from 'node:crypto'

export const SECRET_PREFIX = 'whsec_'
/** 32 random bytes: above the spec's 24-byte minimum, and the length the standardwebhooks libraries make. */
const SECRET_BYTES = 32

export function newWebhookSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString('base64')}`
}

export function secretKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64')
}

/** One `v1,<sig>` per secret, space-separated: during a rotation's overlap both secrets sign. */
export function signPayload(q: {
  id: string
  timestampSeconds: number
  body: string
  secrets: readonly string[]
}): string {
  const signed = `${q.id}.${q.timestampSeconds}.${q.body}`
  return q.secrets
    .map((s) => `v1,${createHmac('sha256', secretKey(s)).update(signed).digest('base64')}`)
    .join(' ')
}

export interface SignedHeaders {
  'webhook-id': string
  'webhook-timestamp': string
  'webhook-signature': string
}

export function signedHeaders(q: {
  id: string
  body: string
  secrets: readonly string[]
  nowMs?: number
}): SignedHeaders {
  const timestampSeconds = Math.floor((q.nowMs ?? Date.now()) / 1000)
  return {
    'webhook-id': q.id,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': signPayload({ id: q.id, timestampSeconds, body: q.body, secrets: q.secrets }),
  }
}
