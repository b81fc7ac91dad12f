// The merchant dashboard in a real browser (chromium, headless, through playwright-core): sign in with the API
// key (the session cookie is HttpOnly, Secure, SameSite=Strict, and chromium keeps it on http://127.0.0.1),
// create an endpoint, see a call paid with a real transfer appear and a paid WebSocket session as one row, create and refund a payment, redeliver a
// webhook, roll the key, sign out. The page runs under a CSP without 'unsafe-inline' and raises no error.
// Requests without the cookie, with a forged or missing CSRF token, or with an expired or ended session are
// refused and change nothing. Screenshots at 390 and 1280 px: docs/dashboard/ (DASHBOARD_DOCS_SHOTS=1).
import { mkdirSync } from 'node:fs'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { parseUnits } from 'viem'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { startDemoRealtime } from '../../src/cli/demo-realtime.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { openWs } from '../helpers/ws-client.ts'
import { launchChromium } from './launch.ts'

// The screenshots the docs show are refreshed with DASHBOARD_DOCS_SHOTS=1; other runs write beside the
// checkout's, so a test run leaves the working tree clean.
const SHOTS = new URL(
  process.env.DASHBOARD_DOCS_SHOTS ? '../../docs/dashboard/' : '../artifacts/dashboard/',
  import.meta.url,
).pathname
const COOKIE = '__Secure-tollgate_session'

let svc: TestService
let browser: Browser
let context: BrowserContext
let page: Page
let payer: Funded
let upstream: Upstream
let receiver: WebhookReceiver
let merchant: Awaited<ReturnType<typeof registerMerchant>>
const pageErrors: string[] = []
let expected400 = 0

/** Screenshots of the current page at phone and desktop widths. */
async function shots(name: string) {
  for (const width of [390, 1280]) {
    await page.setViewportSize({ width, height: width === 390 ? 844 : 800 })
    // The chart is redrawn at its container's width after a resize.
    await page.waitForFunction(() =>
      [...(globalThis as any).document.querySelectorAll('.chart')].every(
        (c: any) =>
          !c.offsetParent ||
          c.querySelector('svg')?.viewBox.baseVal.width === Math.max(300, Math.round(c.clientWidth)),
      ),
    )
    // Nothing may stick out sideways at either width.
    const overflow = await page.evaluate(() => {
      const w = globalThis as any
      return w.document.documentElement.scrollWidth - w.innerWidth
    })
    expect(overflow, `${name} at ${width} px scrolls sideways`).toBeLessThanOrEqual(0)
    await page.screenshot({ path: `${SHOTS}${name}-${width}.png`, fullPage: true })
  }
}

/** The control named exactly so (its accessible name). */
const label = (name: string) => page.getByLabel(name, { exact: true })

/** Moves to a page with the keyboard: focus its link in the navigation, press Enter. */
async function go(name: string, heading: string) {
  await page.getByRole('navigation', { name: 'Dashboard' }).getByRole('link', { name, exact: true }).focus()
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { level: 2, name: heading }).waitFor()
  expect(await page.getByRole('link', { name, exact: true }).getAttribute('aria-current')).toBe('page')
}

/** The session cookie the browser holds, for requests made outside it. */
async function sessionCookie(): Promise<string> {
  const c = (await context.cookies(`${svc.url}/api/v1/`)).find((x) => x.name === COOKIE)
  return c ? `${c.name}=${c.value}` : ''
}

function apiAs(cookie: string, path: string, init: { method?: string; body?: unknown; csrf?: string } = {}) {
  return svc.api(path, {
    method: init.method,
    body: init.body,
    headers: { cookie, ...(init.csrf !== undefined ? { 'x-csrf-token': init.csrf } : {}) },
  })
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true })
  ;[svc, browser, payer, upstream, receiver] = await Promise.all([
    startTestService({
      overrides: {
        chain: { poll_interval_ms: 200 },
        verify: { wait_ms: 1000 },
      },
    }),
    launchChromium().then((l) => l.browser),
    fundedAccount(1_000_000_000n),
    startUpstream(),
    startWebhookReceiver(),
  ])
  merchant = await registerMerchant(svc)
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: svc.url })
  page = await context.newPage()
  page.on('pageerror', (e) => pageErrors.push(e.message))
  page.on('console', (m) => {
    // A 401 the page expects (no session yet) is logged by chromium as a failed resource load, and so is
    // each 400 a test provokes on purpose (counted in expected400).
    if (m.type() !== 'error' || /status of 401/.test(m.text())) return
    if (expected400 > 0 && /status of 400/.test(m.text())) expected400--
    else pageErrors.push(m.text())
  })
})

afterAll(async () => {
  await browser?.close()
  await Promise.all([svc?.stop(), upstream?.close(), receiver?.close()])
})

describe('merchant dashboard in a browser', () => {
  it('is served under a strict CSP and signs in with the API key for an HttpOnly, Secure, SameSite=Strict cookie', async () => {
    const response = await page.goto(`${svc.url}/dashboard`)
    expect(response!.status()).toBe(200)
    const csp = response!.headers()['content-security-policy']!
    expect(csp).toContain("script-src 'self'")
    expect(csp).toContain("style-src 'self'")
    expect(csp).not.toContain('unsafe-inline')
    expect(csp).not.toContain('unsafe-eval')
    expect(response!.headers()['x-frame-options']).toBe('DENY')
    await label('API key').waitFor()
    await shots('signin')

    // A wrong key: a clear message, no cookie.
    await label('API key').fill('sk_test_00000000000000000000000000')
    await page.getByRole('button', { name: 'Sign in' }).click()
    await expect.poll(() => page.locator('#signin-error').textContent()).toContain('not valid')
    expect(await sessionCookie()).toBe('')

    // Keyboard only: type the key, press Enter.
    await label('API key').fill(merchant.key)
    await label('API key').press('Enter')
    await page.getByRole('heading', { level: 2, name: 'Overview' }).waitFor()
    expect(await page.locator('#business-name').textContent()).toBe('Acme Data')
    // The key is not left in the page.
    expect(await label('API key').inputValue()).toBe('')

    const cookie = (await context.cookies(`${svc.url}/api/v1/`)).find((c) => c.name === COOKIE)!
    expect(cookie).toBeDefined()
    expect(cookie.httpOnly).toBe(true)
    expect(cookie.secure).toBe(true)
    expect(cookie.sameSite).toBe('Strict')
    expect(cookie.path).toBe('/api/v1')
    expect(await page.evaluate(() => (globalThis as any).document.cookie)).toBe('')
    // Only the token's hash is stored.
    const [row] = await svc.sql<{ token_hash: Buffer }[]>`SELECT token_hash FROM dashboard_sessions`
    expect(row!.token_hash.length).toBe(32)
    expect(row!.token_hash.toString('base64url')).not.toBe(cookie.value)
  })

  it('creates an endpoint and edits its price, through the same /api/v1 routes', async () => {
    await go('Endpoints', 'Endpoints')
    await label('Name').fill('Weather API')
    await label('Upstream URL').fill(upstream.url)
    await page.locator('#endpoint-form').getByLabel('Price (USDC)', { exact: true }).fill('0.25')
    await page.getByRole('button', { name: 'Create endpoint' }).click()
    await page.getByRole('row', { name: /Weather API/ }).waitFor()
    const list = await svc.api('/api/v1/endpoints', { key: merchant.key })
    expect(list.body.data).toHaveLength(1)
    expect(list.body.data[0]).toMatchObject({ name: 'Weather API', price: 0.25, status: 'active' })

    // By keyboard: the row's button, then Enter in the price field saves.
    await page.getByRole('button', { name: 'Edit pricing of Weather API' }).focus()
    await page.keyboard.press('Enter')
    const price = page.getByRole('dialog').getByLabel('Price (USDC)', { exact: true })
    expect(await price.inputValue()).toBe('0.25')
    await price.fill('0.5')
    await price.press('Enter')
    await expect.poll(() => page.getByRole('row', { name: /Weather API/ }).textContent()).toContain('$0.50')
    expect((await svc.api('/api/v1/endpoints', { key: merchant.key })).body.data[0].price).toBe(0.5)

    // Disable: the metered URL stops answering; enable it again.
    const row = page.getByRole('row', { name: /Weather API/ })
    await page.getByRole('button', { name: 'Disable Weather API' }).click()
    await expect.poll(() => row.textContent()).toContain('disabled')
    const ep = (await svc.api('/api/v1/endpoints', { key: merchant.key })).body.data[0]
    expect(ep.status).toBe('disabled')
    expect((await fetch(ep.metered_url)).status).toBe(404)
    await page.getByRole('button', { name: 'Enable Weather API' }).click()
    await expect.poll(() => row.textContent()).toContain('active')
    expect((await fetch(ep.metered_url)).status).toBe(402)
  })

  it('shows a call paid with a real transfer appear by itself; filters by endpoint and status', async () => {
    const ep = (await svc.api('/api/v1/endpoints', { key: merchant.key })).body.data[0]
    await go('Calls', 'Calls')
    await page.getByText('No calls match.').waitFor()
    const hash = await payUsdc(payer, svc.chain.treasury, parseUnits('0.5', 6))
    const paid = await fetch(`${ep.metered_url}/echo`, { headers: { 'x-payment': hash } })
    expect(paid.status).toBe(200)
    await paid.arrayBuffer()
    await svc.flushCaptures()
    const row = page.getByRole('row', { name: /Weather API/ })
    await row.waitFor({ timeout: 15_000 })

    await label('Endpoint').selectOption(ep.id)
    await label('Upstream status').selectOption('2xx')
    await page.getByRole('button', { name: 'Apply' }).click()
    await row.waitFor()
    expect(await row.textContent()).toContain('$0.50')
    expect(await row.textContent()).toContain('GET 200')
    // A status with no calls: the filter reaches the API.
    await label('Upstream status').selectOption('4xx')
    await page.getByRole('button', { name: 'Apply' }).click()
    await page.getByText('No calls match.').waitFor()
    await label('Upstream status').selectOption('')
    // Dates (UTC): today holds the call, tomorrow nothing.
    const today = new Date().toISOString().slice(0, 10)
    await label('From').fill(today)
    await label('To').fill(today)
    await page.getByRole('button', { name: 'Apply' }).click()
    await row.waitFor()
    await label('From').fill(new Date(Date.now() + 86_400_000).toISOString().slice(0, 10))
    await label('To').fill('')
    await page.getByRole('button', { name: 'Apply' }).click()
    await page.getByText('No calls match.').waitFor()
    await label('From').fill('')
    await page.getByRole('button', { name: 'Apply' }).click()
    await row.waitFor()
    await shots('calls')

    // The balance is cached for 2 s: visit the overview until it shows the call's owner share.
    await expect
      .poll(
        async () => {
          await go('Payouts', 'Payouts')
          await go('Overview', 'Overview')
          await page.locator('#top-endpoints tr').first().waitFor()
          return page.locator('#stat-earned').textContent()
        },
        { timeout: 10_000, interval: 500 },
      )
      .toBe('$0.475')
    expect(await page.locator('#top-endpoints').textContent()).toContain('Weather API')
    expect(await page.locator('#revenue-chart svg[role="img"] rect.bar').count()).toBe(30)
  })

  it('shows a paid WebSocket session as one row: its duration, messages, who ended it and its charge', async () => {
    const realtime = await startDemoRealtime(0)
    try {
      const ep = (
        await svc.api('/api/v1/endpoints', {
          key: merchant.key,
          body: {
            name: 'Realtime',
            upstream_url: `${realtime.url}/v1/realtime`,
            pricing: {
              model: 'usage',
              unit: 'tokens',
              max_price: 0.05,
              input_price_per_million: 2,
              output_price_per_million: 10,
            },
            websocket: {},
          },
        })
      ).body
      const hash = await payUsdc(payer, svc.chain.treasury, parseUnits('0.05', 6))
      const s = await openWs(ep.metered_url, { 'x-payment': hash })
      s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 1000 } }))
      await vi.waitFor(() => expect(s.count('response.done')).toBe(1), { timeout: 15_000 })
      s.ws.close(1000)
      await s.closed
      await svc.flushCaptures()
      await go('Calls', 'Calls')
      await label('Endpoint').selectOption('')
      await label('Upstream status').selectOption('101')
      await page.getByRole('button', { name: 'Apply' }).click()
      // 10 input tokens at 2, 1,000 output tokens at 10, per token: $0.01002, one row.
      const row = page.getByRole('row', { name: /session ·/ })
      await row.waitFor({ timeout: 15_000 })
      const text = (await row.textContent()) ?? ''
      expect(text).toMatch(/session · [\d.]+ s · 1,003 messages · ended by client/)
      expect(text).toContain('$0.01002')
      expect(await page.locator('#calls-body tr').count()).toBe(1)
      await label('Upstream status').selectOption('')
      await page.getByRole('button', { name: 'Apply' }).click()
    } finally {
      await realtime.close()
    }
  })

  it('adds a webhook endpoint and creates, copies, pays and refunds a payment link', async () => {
    await go('Webhooks', 'Webhooks')
    await label('URL').fill(receiver.url)
    await page.getByRole('button', { name: 'Add endpoint' }).click()
    const secret = page.locator('#secret-value')
    await expect.poll(() => secret.inputValue()).toMatch(/^whsec_/)
    await page.getByRole('button', { name: 'Done' }).click()

    await go('Payments', 'Payments')
    await label('Amount (USDC)').fill('12')
    await label('Description').fill('Order #42')
    await page.getByRole('button', { name: 'Create link' }).click()
    const row = page.getByRole('row', { name: /Order #42/ })
    await row.waitFor()
    const payment = (await svc.api('/api/v1/payments', { key: merchant.key })).body.data[0]
    await page.getByRole('button', { name: 'Copy payment link of Order #42' }).click()
    await expect
      .poll(() => page.evaluate(() => (globalThis as any).navigator.clipboard.readText()))
      .toBe(payment.payment_url)

    const hash = await payUsdc(payer, svc.chain.treasury, parseUnits('12', 6))
    const paid = await fetch(payment.payment_url, {
      method: 'POST',
      headers: { accept: 'application/json', 'x-payment': hash },
    })
    expect(paid.status).toBe(200)
    await go('Calls', 'Calls')
    await go('Payments', 'Payments')
    await expect.poll(() => row.textContent()).toContain('paid')

    await page.getByRole('button', { name: 'Refund payment Order #42' }).click()
    await label('Amount (USDC; empty = everything refundable)').fill('2')
    await label('Reason').fill('late delivery')
    await shots('refund')
    await page.getByRole('button', { name: 'Refund', exact: true }).click()
    await expect
      .poll(() => page.locator('#flash').textContent())
      .toMatch(/Refund re_\w+ of \$2\.00 is pending/)
    const refunds = await svc.api('/api/v1/refunds', { key: merchant.key })
    expect(refunds.body.data).toHaveLength(1)
    expect(refunds.body.data[0]).toMatchObject({ payment_id: payment.id, amount: 2, reason: 'late delivery' })
    expect(refunds.body.data[0].wallet.toLowerCase()).toBe(payer.address.toLowerCase())
    await expect.poll(() => row.textContent()).toContain('$2.00 refunded (pending payout)')
    await shots('payments')
  })

  it('shows webhook deliveries and redelivers one; rotates the signing secret', async () => {
    const first = await receiver.waitFor((c) => JSON.parse(c.body).type === 'payment.received', 20_000)
    const eventId = JSON.parse(first.body).id as string
    await go('Webhooks', 'Webhooks')
    const delivery = page.locator(`#deliveries-body tr[data-event="${eventId}"]`)
    await expect.poll(() => delivery.textContent(), { timeout: 15_000 }).toContain('delivered')
    const before = receiver.received.filter((c) => JSON.parse(c.body).id === eventId).length
    await delivery.getByRole('button', { name: /^Redeliver payment\.received/ }).click()
    await expect.poll(() => page.locator('#flash').textContent()).toContain('queued for redelivery')
    await receiver.waitFor(
      () => receiver.received.filter((c) => JSON.parse(c.body).id === eventId).length > before,
      20_000,
    )
    await page.getByRole('button', { name: /^Recent deliveries to / }).click()
    await expect.poll(() => delivery.textContent(), { timeout: 15_000 }).toContain('delivered')
    await shots('webhooks')

    const hook = (await svc.api('/api/v1/webhooks', { key: merchant.key })).body.data[0]
    await page.getByRole('button', { name: `Rotate signing secret of ${hook.url}` }).click()
    await expect.poll(() => page.locator('#secret-value').inputValue()).toMatch(/^whsec_/)
    await page.getByRole('button', { name: 'Done' }).click()
    const after = (await svc.api(`/api/v1/webhooks/${hook.id}`, { key: merchant.key })).body
    expect(after.previous_secret_expires_at).not.toBeNull()
  })

  it('refuses requests without the cookie, with a forged or missing CSRF token, or an expired session; nothing changes', async () => {
    const cookie = await sessionCookie()
    const count = async () => (await svc.api('/api/v1/endpoints', { key: merchant.key })).body.data.length
    const before = await count()
    const body = { upstream_url: upstream.url, price: 1 }

    const noCookie = await svc.api('/api/v1/endpoints', { body })
    expect(noCookie.status).toBe(401)
    expect(noCookie.body.error.code).toBe('missing_api_key')
    expect((await svc.api('/api/v1/account')).status).toBe(401)

    const { csrf_token } = (await apiAs(cookie, '/api/v1/dashboard/session')).body
    expect(csrf_token).toMatch(/^[\w-]{43}$/)
    const forged = await apiAs(cookie, '/api/v1/endpoints', { body, csrf: `${csrf_token.slice(0, -2)}AA` })
    expect(forged.status).toBe(403)
    expect(forged.body.error.code).toBe('invalid_csrf_token')
    const missing = await apiAs(cookie, '/api/v1/endpoints', { body })
    expect(missing.status).toBe(403)
    // Reads need no CSRF token; the right token is accepted (and the count proves nothing was made so far).
    expect((await apiAs(cookie, '/api/v1/account')).status).toBe(200)
    expect(await count()).toBe(before)

    // A second session, expired in the database: refused as expired.
    const other = await svc.api('/api/v1/dashboard/sessions', { body: { api_key: merchant.key } })
    expect(other.status).toBe(201)
    const otherCookie = other.headers.get('set-cookie')!.split(';')[0]!
    await svc.sql`UPDATE dashboard_sessions SET expires_at = now() - interval '1 second'
                  WHERE token_hash <> (SELECT token_hash FROM dashboard_sessions ORDER BY created_at LIMIT 1)`
    const expired = await apiAs(otherCookie, '/api/v1/endpoints', { body, csrf: other.body.csrf_token })
    expect(expired.status).toBe(401)
    expect(expired.body.error.code).toBe('session_expired')
    const garbage = await apiAs(`${COOKIE}=${'A'.repeat(43)}`, '/api/v1/account')
    expect(garbage.status).toBe(401)
    expect(garbage.body.error.code).toBe('invalid_session')
    expect(await count()).toBe(before)
  })

  it('sets usage and rules pricing through the form; an invalid value shows the API error and changes nothing', async () => {
    const endpoints = async () =>
      (await svc.api('/api/v1/endpoints', { key: merchant.key })).body.data as any[]
    const named = async (name: string) => (await endpoints()).find((e) => e.name === name)
    const form = page.locator('#endpoint-form')
    const inForm = (name: string) => form.getByLabel(name, { exact: true })
    await go('Endpoints', 'Endpoints')

    // A usage-priced endpoint, per million tokens.
    await inForm('Name').fill('LLM proxy')
    await inForm('Upstream URL').fill(upstream.url)
    await inForm('Pricing model').selectOption('usage')
    await inForm('Unit').selectOption('tokens')
    await inForm('Ceiling per call (USDC)').fill('0.05')
    await inForm('Input, per million tokens (USDC)').fill('2')
    await inForm('Output, per million tokens (USDC)').fill('10')
    await inForm('Cached input, per million tokens (USDC)').fill('1')
    await inForm('When the answer has no usage').selectOption('nothing')
    // Only the chosen model's and unit's fields show (the duration rate is not sent either).
    expect(await inForm('Per second (USDC)').isVisible()).toBe(false)
    expect(await inForm('Price (USDC)').isVisible()).toBe(false)
    expect(await inForm('Default price (USDC)').isVisible()).toBe(false)
    await page.getByRole('button', { name: 'Create endpoint' }).click()
    const llmRow = page.getByRole('row', { name: /LLM proxy/ })
    await llmRow.waitFor()
    expect(await llmRow.textContent()).toContain('usage · Tokens · up to $0.05')
    const llm = await named('LLM proxy')
    expect(llm.pricing).toEqual({
      model: 'usage',
      unit: 'tokens',
      max_price: 0.05,
      input_price_per_million: 2,
      output_price_per_million: 10,
      cached_input_price_per_million: 1,
      on_missing_usage: 'nothing',
    })
    expect(llm.price).toBe(0.05)

    // A fixed endpoint, then edited to rules with the keyboard.
    await inForm('Name').fill('Geo API')
    await inForm('Upstream URL').fill(upstream.url)
    expect(await inForm('Pricing model').inputValue()).toBe('fixed')
    await inForm('Price (USDC)').fill('0.1')
    await inForm('Price (USDC)').press('Enter')
    await page.getByRole('row', { name: /Geo API/ }).waitFor()
    expect((await named('Geo API')).pricing).toEqual({ model: 'fixed', price: 0.1 })
    await page.getByRole('button', { name: 'Edit pricing of Geo API' }).focus()
    await page.keyboard.press('Enter')
    const dialog = page.getByRole('dialog')
    const inDialog = (name: string) => dialog.getByLabel(name, { exact: true })
    await inDialog('Pricing model').selectOption('rules')
    await inDialog('Rule 1 method').selectOption('POST')
    await inDialog('Rule 1 path prefix').fill('/v1/batch')
    await inDialog('Rule 1 price (USDC)').fill('0.3')
    await dialog.getByRole('button', { name: 'Add rule' }).focus()
    await page.keyboard.press('Enter')
    // The new rule's path field has the focus.
    await page.keyboard.type('/v1/')
    await inDialog('Rule 2 price (USDC)').fill('0.2')
    await inDialog('Default price (USDC)').fill('0.1')
    await inDialog('Default price (USDC)').press('Enter')
    const geoRow = page.getByRole('row', { name: /Geo API/ })
    await expect.poll(() => geoRow.textContent()).toContain('rules · 2 rules · default $0.10')
    expect(await dialog.isVisible()).toBe(false)
    expect((await named('Geo API')).pricing).toEqual({
      model: 'rules',
      rules: [
        { method: 'POST', path_prefix: '/v1/batch', price: 0.3 },
        { method: null, path_prefix: '/v1/', price: 0.2 },
      ],
      default_price: 0.1,
    })

    // Invalid in the dialog: the API's message beside the fields, on the field it names; nothing changes.
    await page.getByRole('button', { name: 'Edit pricing of LLM proxy' }).click()
    expect(await inDialog('Input, per million tokens (USDC)').inputValue()).toBe('2')
    await inDialog('Output, per million tokens (USDC)').fill('')
    await inDialog('Ceiling per call (USDC)').fill('0.01')
    expected400++
    await dialog.getByRole('button', { name: 'Save' }).click()
    const alert = dialog.getByRole('alert')
    await expect
      .poll(() => alert.textContent())
      .toBe('pricing.output_price_per_million is required for unit tokens')
    const output = inDialog('Output, per million tokens (USDC)')
    expect(await output.getAttribute('aria-invalid')).toBe('true')
    expect(await output.getAttribute('aria-describedby')).toBe('price-error')
    expect(await dialog.isVisible()).toBe(true)
    expect((await named('LLM proxy')).pricing).toEqual(llm.pricing)
    await dialog.getByRole('button', { name: 'Cancel' }).click()

    // Invalid in the new-endpoint form: a rule path without its slash; no endpoint is made.
    const before = (await endpoints()).length
    await inForm('Name').fill('Broken')
    await inForm('Upstream URL').fill(upstream.url)
    await inForm('Pricing model').selectOption('rules')
    await inForm('Rule 1 path prefix').fill('v1')
    await inForm('Rule 1 price (USDC)').fill('0.2')
    await inForm('Default price (USDC)').fill('0.1')
    expected400++
    await page.getByRole('button', { name: 'Create endpoint' }).click()
    await expect
      .poll(() => form.getByRole('alert').textContent())
      .toBe('pricing.rules.0.path_prefix must start with /')
    expect(await inForm('Rule 1 path prefix').getAttribute('aria-invalid')).toBe('true')
    expect((await endpoints()).length).toBe(before)
    // Fixed, it goes through and the message goes away.
    await inForm('Rule 1 path prefix').fill('/v1')
    await page.getByRole('button', { name: 'Create endpoint' }).click()
    await page.getByRole('row', { name: /Broken/ }).waitFor()
    expect(await form.getByRole('alert').isVisible()).toBe(false)
    expect((await endpoints()).length).toBe(before + 1)
    expect(expected400).toBe(0)
    // The docs' picture shows the usage model's fields.
    await inForm('Pricing model').selectOption('usage')
    await shots('endpoints')
  })

  it('rolls the API key and stays signed in on the new one; signing out ends the session', async () => {
    // The next payout batch pays the merchant's share and the refund; the page shows their transactions.
    await svc.jobs.runNow('payout-batch')
    await expect
      .poll(
        async () => {
          await go('Overview', 'Overview')
          await go('Payouts', 'Payouts')
          return page.locator('#payouts-body tr[data-id] .mono').count()
        },
        { timeout: 30_000, interval: 1000 },
      )
      .toBeGreaterThan(0)
    await shots('payouts')
    await go('Overview', 'Overview')
    // The overview refreshes itself every 5 s (the balance is cached 2 s).
    await expect
      .poll(() => page.locator('#stat-paidout').textContent(), { timeout: 15_000 })
      .not.toBe('$0.00')
    await shots('overview')
    await go('API keys', 'API keys')
    await label('Old keys keep working for').selectOption('0')
    await page.getByRole('button', { name: 'Roll API key' }).click()
    await expect.poll(() => page.locator('#secret-value').inputValue()).toMatch(/^sk_test_/)
    const newKey = await page.locator('#secret-value').inputValue()
    await page.getByRole('button', { name: 'Done' }).click()
    expect((await svc.api('/api/v1/account', { key: merchant.key })).status).toBe(401)
    expect((await svc.api('/api/v1/account', { key: newKey })).status).toBe(200)
    // The page went on with a session opened with the new key.
    await go('Overview', 'Overview')
    expect(await page.locator('#flash').getAttribute('class')).not.toContain('bad')
    await go('API keys', 'API keys')
    await shots('keys')

    const cookie = await sessionCookie()
    expect((await apiAs(cookie, '/api/v1/account')).status).toBe(200)
    await page.getByRole('button', { name: 'Sign out' }).click()
    await label('API key').waitFor()
    expect(await sessionCookie()).toBe('')
    const ended = await apiAs(cookie, '/api/v1/account')
    expect(ended.status).toBe(401)
    expect(ended.body.error.code).toBe('invalid_session')
    expect(pageErrors).toEqual([])
  })
})
