// The hosted checkout in a real browser (chromium, headless, through playwright-core): a second wallet pays
// the amount shown by a plain transfer and the page shows the receipt by itself; an injected EIP-1193 wallet
// pays it too; a pasted hash the chain never saw is said to be unknown. Screenshots at phone and desktop
// widths for every state go to test/artifacts/.
import { mkdirSync } from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import { createWalletClient, type Hex, http, parseUnits } from 'viem'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { launchChromium } from './launch.ts'

const ARTIFACTS = new URL('../artifacts/', import.meta.url).pathname

const shot = (page: Page, name: string) =>
  page.screenshot({ path: `${ARTIFACTS}${name}.png`, fullPage: true })

/** Screenshots of the page as it is, at 390 and 1280 px wide. */
async function shots(page: Page, name: string) {
  await page.setViewportSize({ width: 390, height: 844 })
  await shot(page, `${name}-390`)
  await page.setViewportSize({ width: 1280, height: 800 })
  await shot(page, `${name}-1280`)
  await page.setViewportSize({ width: 390, height: 844 })
}

let svc: TestService
let browser: Browser
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true })
  ;[svc, browser, payer] = await Promise.all([
    startTestService({ overrides: { chain: { poll_interval_ms: 200 }, verify: { wait_ms: 1000 } } }),
    launchChromium().then((l) => l.browser),
    fundedAccount(1_000_000_000n),
  ])
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await browser?.close()
  await svc?.stop()
})

async function createPayment(body: Record<string, unknown>) {
  const r = await svc.api('/api/v1/payments', { key: merchant.key, body })
  expect(r.status).toBe(201)
  return r.body as { id: string; payment_url: string }
}

/**
 * window.ethereum for the page: every request goes to a viem wallet on the test chain. It starts on
 * another chain so the page has to ask for the switch, as a real wallet would make it.
 */
async function injectWallet(page: Page, account: Funded) {
  const chainId = inject('chainId')
  const wallet = createWalletClient({ account: account.account, transport: http(inject('rpcUrl')) })
  const calls: string[] = []
  let current = 1
  await page.exposeFunction('__testWallet', async (method: string, params: any[]) => {
    calls.push(method)
    switch (method) {
      case 'eth_requestAccounts':
      case 'eth_accounts':
        return { result: [account.address] }
      case 'eth_chainId':
        return { result: `0x${current.toString(16)}` }
      case 'wallet_switchEthereumChain':
        if (Number.parseInt(params[0].chainId, 16) !== chainId)
          return { error: { code: 4902, message: 'unknown chain' } }
        current = chainId
        return { result: null }
      case 'eth_sendTransaction': {
        const tx = params[0] as { from: Hex; to: Hex; data: Hex }
        if (tx.from.toLowerCase() !== account.address.toLowerCase())
          return { error: { code: 4100, message: 'unknown account' } }
        const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data, chain: null })
        return { result: hash }
      }
      default:
        return { error: { code: 4200, message: `unsupported method ${method}` } }
    }
  })
  await page.addInitScript(() => {
    const w = globalThis as any
    w.ethereum = {
      isTestWallet: true,
      async request({ method, params }: { method: string; params?: unknown[] }) {
        const r = await w.__testWallet(method, params ?? [])
        if (r.error) throw Object.assign(new Error(r.error.message), { code: r.error.code })
        return r.result
      },
    }
  })
  return calls
}

describe('hosted checkout in a browser', () => {
  it('a second wallet sends the amount shown; the page shows the receipt by itself, no hash, no reload', async () => {
    const p = await createPayment({
      amount: 25,
      description: 'Order #42 · 1 year of Weather API Pro',
      success_url: 'https://shop.example/thanks?session={CHECKOUT_SESSION_ID}',
      cancel_url: 'https://shop.example/cart',
    })
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(e.message))
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text())
    })
    const response = await page.goto(p.payment_url)
    expect(response!.status()).toBe(200)
    expect(response!.headers().uwebsockets).toBeUndefined()
    const figure = (await page.locator('#due-copy').textContent())!.replace(' USDC', '')
    expect(figure).toMatch(/^25\.\d{1,6}$/)
    expect(await page.locator('#ribbon').isVisible()).toBe(true)
    expect(await page.locator('#cancel-link').getAttribute('href')).toBe('https://shop.example/cart')
    expect((await page.locator('#qr svg').boundingBox())!.width).toBeGreaterThan(150)
    await shots(page, 'checkout-pending')
    await page.evaluate(() => {
      ;(globalThis as any).__sameDocument = true
    })

    // What scanning the QR code does: another wallet sends exactly the figure shown, nothing is pasted.
    const atomic = parseUnits(figure, 6)
    const sentAt = Date.now()
    const hash = await payUsdc(payer, svc.chain.treasury, atomic)
    await page.locator('#receipt').waitFor({ state: 'visible', timeout: 8_000 })
    const tookMs = Date.now() - sentAt
    expect(await page.evaluate(() => (globalThis as any).__sameDocument)).toBe(true)
    expect(await page.locator('#pay').isHidden()).toBe(true)
    expect(await page.locator('#r-tx').textContent()).toBe(hash.toLowerCase())
    expect(await page.locator('#success').getAttribute('href')).toBe(
      `https://shop.example/thanks?session=${p.id}`,
    )
    await shots(page, 'checkout-paid')
    console.log(`plain transfer → receipt on the page in ${tookMs} ms`)
    expect(errors).toEqual([])
    await context.close()
  })

  it('pays with the browser wallet (EIP-1193) and shows the receipt without a reload', async () => {
    const p = await createPayment({ amount: 24.99, description: 'Browser wallet' })
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    const walletCalls = await injectWallet(page, payer)
    await page.goto(p.payment_url)
    const shown = await page.locator('#due').textContent()
    expect(shown).toMatch(/^24\.99\d{0,4}$/)
    await page.click('#wallet')
    await page.locator('#receipt').waitFor({ state: 'visible', timeout: 20_000 })
    expect(await page.locator('#r-amount').textContent()).toBe(`${shown} USDC`)
    expect(walletCalls).toEqual([
      'eth_requestAccounts',
      'eth_chainId',
      'wallet_switchEthereumChain',
      'eth_sendTransaction',
    ])
    const api = await svc.api(`/api/v1/payments/${p.id}`, { key: merchant.key })
    expect(api.body).toMatchObject({ status: 'paid', payer: payer.address })
    await context.close()
  })

  it('takes a pasted transaction hash, and shows what is left after a partial payment', async () => {
    const p = await createPayment({ amount: 10, description: 'Pasted hash' })
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    await page.goto(p.payment_url)
    const partial = await payUsdc(payer, svc.chain.treasury, 4_000_000n)
    await page.fill('#tx', partial)
    await page.click('#txform button')
    await expect.poll(() => page.locator('#due').textContent(), { timeout: 10_000 }).toBe('6.000001')
    expect(await page.locator('#partial').textContent()).toContain('6.000001 USDC left to pay')
    await shots(page, 'checkout-partial')
    const rest = await payUsdc(payer, svc.chain.treasury, 6_000_000n)
    await page.fill('#tx', rest)
    await page.click('#txform button')
    await page.locator('#receipt').waitFor({ state: 'visible', timeout: 10_000 })
    expect(await page.locator('#r-amount').textContent()).toBe('10 USDC')
    await context.close()
  })

  it('says a pasted hash the chain never saw is unknown, after a bounded wait', async () => {
    const p = await createPayment({ amount: 3, description: 'Typo in the hash' })
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    await page.goto(p.payment_url)
    await page.fill('#tx', `0x${'ab'.repeat(32)}`)
    await page.click('#txform button')
    await expect
      .poll(() => page.locator('#msg').textContent(), { timeout: 25_000, interval: 500 })
      .toContain('No transaction with this hash was found')
    await shots(page, 'checkout-unknown-hash')
    await context.close()
  })

  it('answers not found, expired and canceled payments with a clear page (no amount due of 0)', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    const unknown = await page.goto(`${svc.url}/pay/pay_doesnotexist`)
    expect(unknown!.status()).toBe(404)
    expect(await page.locator('h1').textContent()).toBe('Payment not found')
    const box = (await page.locator('main').boundingBox())!
    expect(box.width).toBeGreaterThan(300)
    await shots(page, 'checkout-not-found')

    const p = await createPayment({ amount: 1, description: 'Too late' })
    await svc.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${p.id}`
    const expired = await page.goto(p.payment_url)
    expect(expired!.status()).toBe(410)
    expect(await page.locator('#gone-title').textContent()).toBe('This payment has expired')
    await shots(page, 'checkout-expired')

    const c = await createPayment({
      amount: 12,
      description: 'Changed my mind',
      cancel_url: 'https://shop.example/cart',
    })
    expect(
      (await svc.api(`/api/v1/payments/${c.id}/cancel`, { key: merchant.key, method: 'POST' })).status,
    ).toBe(200)
    const canceled = await page.goto(c.payment_url)
    expect(canceled!.status()).toBe(410)
    expect(await page.locator('#gone-title').textContent()).toBe('This payment was canceled')
    expect(await page.locator('#due-label').textContent()).toBe('Canceled')
    expect(await page.locator('#due').textContent()).toBe('12')
    expect(await page.locator('.when-gone .back').isVisible()).toBe(true)
    await shots(page, 'checkout-canceled')
    await context.close()
  })
})
