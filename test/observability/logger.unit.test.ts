import { describe, expect, it } from 'vitest'
import { createLogger } from '../../src/observability/logger.ts'

function capture(settings: Parameters<typeof createLogger>[0] = 'debug') {
  const lines: Array<Record<string, any>> = []
  const logger = createLogger(settings, {
    destination: { write: (s: string) => void lines.push(JSON.parse(s)) },
  })
  return { logger, lines }
}

describe('logger', () => {
  it('writes JSON lines with level, time, message and fields; bigint as a number', () => {
    const { logger, lines } = capture()
    logger.info('hello', { request_id: 'req_1', endpoint_id: 'ep_1', amount: 10n })
    expect(lines[0]).toMatchObject({ level: 'info', msg: 'hello', request_id: 'req_1', endpoint_id: 'ep_1' })
    expect(Date.parse(lines[0]!.time)).toBeGreaterThan(0)
    expect(String(lines[0]!.amount)).toBe('10')
  })

  it('keeps an error’s stack, code and cause', () => {
    const { logger, lines } = capture()
    const root = Object.assign(new Error('connection refused'), { code: 'ECONNREFUSED' })
    const err = Object.assign(new Error('claim failed', { cause: root }), { code: 'TOLLGATE_CLAIM' })
    logger.error('boom', { err })
    const e = lines[0]!.err
    expect(e.message).toBe('claim failed')
    expect(e.code).toBe('TOLLGATE_CLAIM')
    expect(e.stack).toContain('logger.unit.test.ts')
    expect(e.cause).toMatchObject({ message: 'connection refused', code: 'ECONNREFUSED' })
    expect(e.cause.stack).toContain('Error: connection refused')
  })

  it('redacts keys, secrets and payment proofs wherever they appear', () => {
    const { logger, lines } = capture()
    logger.warn('careful', {
      authorization: 'Bearer sk_test_abc',
      headers: { authorization: 'Bearer sk_live_x', 'x-payment': '0xproof', 'content-type': 'json' },
      webhook: { secret: 'whsec_123', url: 'https://example.com' },
      config: { treasury_private_key: '0xdeadbeef' },
      private_key: '0xkey',
      api_key: 'sk_test_def',
    })
    const text = JSON.stringify(lines[0])
    for (const secret of [
      'sk_test_abc',
      'sk_live_x',
      '0xproof',
      'whsec_123',
      '0xdeadbeef',
      '0xkey',
      'sk_test_def',
    ])
      expect(text).not.toContain(secret)
    expect(lines[0]!.headers['content-type']).toBe('json')
    expect(lines[0]!.webhook.url).toBe('https://example.com')
  })

  it('honours the level and child fields', () => {
    const { logger, lines } = capture('warn')
    logger.info('dropped')
    logger.child({ job: 'payouts' }).warn('kept')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ msg: 'kept', job: 'payouts', level: 'warn' })
  })

  it('access log: off by default, all, or sampled at the rate', () => {
    expect(capture('info').logger.access.on).toBe(false)
    const all = capture({ level: 'info', access: 'all' }).logger.access
    expect(all.on && all.sample()).toBe(true)
    const sampled = capture({ level: 'info', access: 'sampled', access_sample_rate: 0.25 }).logger.access
    let hits = 0
    for (let i = 0; i < 20_000; i++) if (sampled.sample()) hits++
    expect(hits / 20_000).toBeGreaterThan(0.2)
    expect(hits / 20_000).toBeLessThan(0.3)
  })
})
