// The hosted checkout in a real browser (headless chromium through playwright-core, see launch.ts): the page
// shows the amount and QR code; an injected EIP-1193 wallet backed by a viem account on anvil pays it; the
// receipt appears without a reload. Screenshots at phone and desktop widths go to test/artifacts/.
import { mkdirSync } from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import { createWalletClient, type Hex, http } from 'viem'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { type Funded, fundedAccount } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { launchChromium } from './launch.ts'

const ARTIFACTS = new URL('../artifacts/', import.meta.url).pathname

let svc: TestService
let browser: Browser
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true })
  ;[svc, browser, payer] = await Promise.all([
    startTestService(),
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
  it('shows amount and QR code, pays with the browser wallet, and shows the receipt without a reload', async () => {
    const p = await createPayment({
      amount: 24.99,
      description: 'Order #123 · 1 year of Weather API Pro',
      success_url: 'https://shop.example/thanks',
    })
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(e.message))
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text())
    })
    const walletCalls = await injectWallet(page, payer)

    const response = await page.goto(p.payment_url)
    expect(response!.status()).toBe(200)
    await expect.poll(() => page.locator('#due').textContent()).toBe('24.99')
    expect(await page.locator('#merchant').textContent()).toBe('Acme Data')
    expect(await page.locator('#recipient').textContent()).toBe(svc.chain.treasury)
    const qr = page.locator('#qr svg')
    expect(await qr.count()).toBe(1)
    expect((await qr.boundingBox())!.width).toBeGreaterThan(150)
    await page.screenshot({ path: `${ARTIFACTS}checkout-390.png`, fullPage: true })
    await page.setViewportSize({ width: 1280, height: 800 })
    await page.screenshot({ path: `${ARTIFACTS}checkout-1280.png`, fullPage: true })

    // A marker that a reload would wipe.
    await page.evaluate(() => {
      ;(globalThis as any).__sameDocument = true
    })
    await page.click('#wallet')
    await page.locator('#receipt').waitFor({ state: 'visible', timeout: 20_000 })
    expect(await page.evaluate(() => (globalThis as any).__sameDocument)).toBe(true)
    expect(await page.locator('#pay').isHidden()).toBe(true)
    expect(await page.locator('#r-amount').textContent()).toBe('24.99 USDC')
    const tx = await page.locator('#r-tx').textContent()
    expect(tx).toMatch(/^0x[0-9a-f]{64}$/)
    expect(await page.locator('#success').getAttribute('href')).toBe('https://shop.example/thanks')
    expect(walletCalls).toEqual([
      'eth_requestAccounts',
      'eth_chainId',
      'wallet_switchEthereumChain',
      'eth_sendTransaction',
    ])
    await page.screenshot({ path: `${ARTIFACTS}checkout-paid-1280.png`, fullPage: true })
    await page.setViewportSize({ width: 390, height: 844 })
    await page.screenshot({ path: `${ARTIFACTS}checkout-paid-390.png`, fullPage: true })

    const api = await svc.api(`/api/v1/payments/${p.id}`, { key: merchant.key })
    expect(api.body).toMatchObject({ status: 'paid', transaction: tx, payer: payer.address })
    expect(errors).toEqual([])
    await context.close()
  })

  it('takes a pasted transaction hash, and shows what is left after a partial payment', async () => {
    const p = await createPayment({ amount: 10, description: 'Pasted hash' })
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    await page.goto(p.payment_url)
    const { payUsdc } = await import('../helpers/accounts.ts')
    const partial = await payUsdc(payer, svc.chain.treasury, 4_000_000n)
    await page.fill('#tx', partial)
    await page.click('#txform button')
    await expect.poll(() => page.locator('#due').textContent(), { timeout: 10_000 }).toBe('6')
    expect(await page.locator('#partial').textContent()).toContain('6 USDC left to pay')
    await page.screenshot({ path: `${ARTIFACTS}checkout-partial-390.png`, fullPage: true })
    const rest = await payUsdc(payer, svc.chain.treasury, 6_000_000n)
    await page.fill('#tx', rest)
    await page.click('#txform button')
    await page.locator('#receipt').waitFor({ state: 'visible', timeout: 10_000 })
    expect(await page.locator('#r-amount').textContent()).toBe('10 USDC')
    await context.close()
  })

  it('answers unknown and expired payments with a clear page', async () => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } })
    const page = await context.newPage()
    const unknown = await page.goto(`${svc.url}/pay/pay_doesnotexist`)
    expect(unknown!.status()).toBe(404)
    expect(await page.locator('h1').textContent()).toBe('Payment not found')
    const p = await createPayment({ amount: 1, description: 'Too late' })
    await svc.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${p.id}`
    const expired = await page.goto(p.payment_url)
    expect(expired!.status()).toBe(410)
    expect(await page.locator('#gone-title').textContent()).toBe('This payment has expired')
    await page.screenshot({ path: `${ARTIFACTS}checkout-expired-390.png`, fullPage: true })
    await context.close()
  })
})
