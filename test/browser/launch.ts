// Finds a chromium for the browser tests, so `npm ci && npm test` needs only Node: CHROMIUM_PATH if set
// (`bundled` forces the next-but-one), else Debian's /usr/bin/chromium, else the build that
// @sparticuz/chromium (a devDependency) unpacks.
// If none starts, the error says exactly what to install.
import { existsSync, rmSync } from 'node:fs'
import { type Browser, chromium } from 'playwright-core'

const SYSTEM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome']
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

/** Its headless_shell has no GPU: render with SwiftShader, as @sparticuz/chromium itself does. */
const BUNDLED_EXTRA = ['--no-zygote', '--use-gl=angle', '--use-angle=swiftshader', '--in-process-gpu']

export const INSTALL_HINT =
  'the browser tests need a chromium: install it (Debian/Ubuntu: `sudo apt-get install chromium`; macOS: ' +
  '`brew install --cask chromium`) or set CHROMIUM_PATH=/path/to/chrome; the bundled @sparticuz/chromium ' +
  'only runs on Linux x64/arm64 (it needs `npm ci` to have installed devDependencies and a writable /tmp). ' +
  'Or skip them: npx vitest run --project unit --project integration'

export async function launchChromium(): Promise<{ browser: Browser; executable: string }> {
  const tried: string[] = []
  const candidates: Array<() => Promise<{ path: string; args: string[] }>> = []
  const wanted = process.env.CHROMIUM_PATH
  if (wanted && wanted !== 'bundled')
    candidates.push(async () => ({ path: process.env.CHROMIUM_PATH!, args: ARGS }))
  else {
    const system = wanted === 'bundled' ? undefined : SYSTEM.find((p) => existsSync(p))
    if (system) candidates.push(async () => ({ path: system, args: ARGS }))
    candidates.push(async () => {
      const { default: bundled } = await import('@sparticuz/chromium')
      // Not bundled.args: they are for AWS Lambda, and their --single-process ends the browser when the
      // first page's context closes.
      return { path: await bundled.executablePath(), args: [...ARGS, ...BUNDLED_EXTRA] }
    })
    // @sparticuz/chromium unpacks to /tmp/chromium once and trusts whatever is there afterwards: an unpack cut
    // short (two test runs unpacking at once, or one killed) left a 150 MB binary of 209 MB that every later
    // run reused and that closed at launch. Tried after the first failed: unpacked afresh.
    candidates.push(async () => {
      const { default: bundled } = await import('@sparticuz/chromium')
      rmSync(await bundled.executablePath(), { force: true })
      return { path: await bundled.executablePath(), args: [...ARGS, ...BUNDLED_EXTRA] }
    })
  }
  for (const candidate of candidates) {
    try {
      const { path, args } = await candidate()
      return { browser: await chromium.launch({ executablePath: path, args }), executable: path }
    } catch (err) {
      tried.push((err as Error).message.split('\n')[0]!)
    }
  }
  throw new Error(`no chromium could be started (${tried.join('; ') || 'none found'}).\n${INSTALL_HINT}`)
}
