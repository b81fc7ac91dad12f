// The zero address is never a payout wallet, and an amount above the configured maximum is told the maximum
// (proxy.max_price for prices, payments.max_amount for payments), whatever notation it came in.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

describe('payout wallets and amount limits', () => {
  let svc: TestService
  let key: string
  beforeAll(async () => {
    svc = await startTestService()
    key = (await registerMerchant(svc)).key
  })
  afterAll(() => svc?.stop())

  it.each(['0x0000000000000000000000000000000000000000', ' 0x0000000000000000000000000000000000000000 '])(
    'register refuses the zero address %j as the payout wallet, creating nothing',
    async (wallet) => {
      const count = async () =>
        (await svc.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM accounts`)[0]!.n
      const before = await count()
      const r = await svc.api('/api/v1/register', { body: { wallet_address: wallet, business_name: 'Burn' } })
      expect(r.status).toBe(400)
      expect(r.body.error).toMatchObject({ code: 'invalid_wallet_address', param: 'wallet_address' })
      expect(r.body.error.message).toMatch(/zero address/)
      expect(await count()).toBe(before)
    },
  )

  it.each([1e30, '1e30', 1001, '1e400'])('a price of %j is told the maximum', async (price) => {
    const r = await svc.api('/api/v1/endpoints', {
      key,
      body: { upstream_url: 'http://127.0.0.1:9/x', price },
    })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({
      code: 'invalid_parameter',
      param: 'price',
      message: 'price must be at most 1000',
    })
  })

  it.each([1e30, '1e30', 1_000_001])('a payment amount of %j is told the maximum', async (amount) => {
    const r = await svc.api('/api/v1/payments', { key, body: { amount, description: 'too much' } })
    expect(r.status).toBe(400)
    expect(r.body.error).toMatchObject({
      code: 'invalid_parameter',
      param: 'amount',
      message: 'amount must be at most 1000000',
    })
  })
})
