// A browser agent on another origin: chromium sends a real CORS preflight for a request carrying
// PAYMENT-SIGNATURE to a metered URL, and the script can read the x402 headers of the answer.
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { launchChromium } from './launch.ts'

let svc: TestService
let upstream: Upstream
let browser: Browser
let meteredUrl: string

beforeAll(async () => {
  ;[svc, upstream, browser] = await Promise.all([
    startTestService(),
    startUpstream(),
    launchChromium().then((l) => l.browser),
  ])
  const merchant = await registerMerchant(svc)
  const ep = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
  })
  meteredUrl = ep.body.metered_url
})
afterAll(async () => {
  await browser?.close()
  await svc?.stop()
  await upstream?.close()
})

describe('a metered URL called from a page on another origin', () => {
  it('passes the preflight and exposes PAYMENT-REQUIRED to the script', async () => {
    const page = await browser.newPage()
    // The upstream's port is another origin than tollgate's.
    await page.goto(`${upstream.url}/echo`)
    const before = upstream.requests.length
    const seen = await page.evaluate(async (url) => {
      // A custom header makes this a non-simple request: chromium preflights it first.
      const r = await fetch(url, {
        method: 'POST',
        headers: { 'PAYMENT-SIGNATURE': 'bm90LWEtcGF5bWVudC1wYXlsb2Fk' },
      })
      const body = await r.json()
      return {
        status: r.status,
        error: body.error,
        required: r.headers.get('payment-required'),
        requestId: r.headers.get('x-request-id'),
      }
    }, meteredUrl)
    expect(seen.status).toBe(402)
    expect(seen.error).toBe('invalid_proof')
    const required = JSON.parse(Buffer.from(seen.required!, 'base64').toString())
    expect(required).toMatchObject({ x402Version: 2, error: 'invalid_proof' })
    expect(seen.requestId).toBeTruthy()
    // The metered call forwarded nothing. (The page's own favicon request may land on the
    // upstream at any time, so count only what came after the page, minus that.)
    const forwarded = upstream.requests.slice(before).filter((r) => !r.url.startsWith('/favicon'))
    expect(forwarded).toEqual([])
    await page.close()
  })
})
