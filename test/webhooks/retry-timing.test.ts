import { Webhook } from 'standardwebhooks'
import { describe, expect, it } from 'vitest'
import { parseRetryAfter, retryDelayMs } from '../../src/control-plane/jobs/webhook-dispatcher.ts'
import { newWebhookSecret, signedHeaders } from '../../src/control-plane/jobs/webhook-signature.ts'

describe('webhook retry timing', () => {
  it('follows the schedule with ±20 % jitter and stops when it is spent', () => {
    const schedule = [5000, 300_000]
    expect(retryDelayMs(schedule, 1, null, () => 0)).toBe(4000)
    expect(retryDelayMs(schedule, 1, null, () => 1)).toBe(6000)
    expect(retryDelayMs(schedule, 2, null, () => 0.5)).toBe(300_000)
    expect(retryDelayMs(schedule, 3, null)).toBeNull()
  })

  it('never retries before a Retry-After, capped at a day', () => {
    expect(retryDelayMs([100], 1, 30_000, () => 0.5)).toBe(30_000)
    expect(retryDelayMs([100], 1, 10 * 86_400_000, () => 0.5)).toBe(86_400_000)
  })

  it('reads Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2026-01-01T00:00:00Z')
    expect(parseRetryAfter('120', now)).toBe(120_000)
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:30 GMT', now)).toBe(30_000)
    expect(parseRetryAfter('soon', now)).toBeNull()
    expect(parseRetryAfter(undefined, now)).toBeNull()
  })
})

describe('webhook signature', () => {
  it('is what the standardwebhooks library expects, with one v1 signature per secret', () => {
    const a = newWebhookSecret()
    const b = newWebhookSecret()
    const body = '{"id":"evt_1","type":"payment.received","created_at":"2026-01-01T00:00:00.000Z","data":{}}'
    const headers = signedHeaders({ id: 'evt_1', body, secrets: [a, b] })
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2)
    expect(new Webhook(a).verify(body, headers)).toMatchObject({ id: 'evt_1' })
    expect(new Webhook(b).verify(body, headers)).toMatchObject({ id: 'evt_1' })
    expect(new Webhook(a).sign('evt_1', new Date(Number(headers['webhook-timestamp']) * 1000), body)).toBe(
      headers['webhook-signature'].split(' ')[0],
    )
  })
})
