// The browser tests run on a machine with only Node: without a system chromium the bundled one starts; with
// none at all, the error says what to install.
import { afterEach, describe, expect, it } from 'vitest'
import { INSTALL_HINT, launchChromium } from './launch.ts'

const saved = process.env.CHROMIUM_PATH
afterEach(() => {
  if (saved === undefined) delete process.env.CHROMIUM_PATH
  else process.env.CHROMIUM_PATH = saved
})

describe('launching chromium', () => {
  it('starts the @sparticuz/chromium build when no system chromium is used, renders pages and outlives a closed context', async () => {
    process.env.CHROMIUM_PATH = 'bundled'
    const { browser, executable } = await launchChromium()
    try {
      expect(executable).not.toMatch(/^\/usr\/bin\//)
      const page = await browser.newPage()
      await page.setContent('<p id="x">tollgate</p>')
      expect(await page.textContent('#x')).toBe('tollgate')
      // Outlives a closed context (the bundled Lambda flags' --single-process would end the browser here).
      const context = await browser.newContext()
      await context.close()
      expect(await (await browser.newPage()).evaluate(() => 6 * 7)).toBe(42)
    } finally {
      await browser.close()
    }
  })

  it('with no usable chromium, fails with what to install', async () => {
    process.env.CHROMIUM_PATH = '/nonexistent/chromium'
    await expect(launchChromium()).rejects.toThrow(INSTALL_HINT)
  })
})
