// The dev chain's anvil is the one its RPC URL reaches. Its port is probed free before anvil binds it; a server
// that takes the port in between (an HTTP upstream answering 200 to anything, another anvil on the same chain
// id) must never be taken for it: anvil fails to bind, and the start fails or, on a probed port, is retried.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { spawnAnvil } from '../../src/chain/anvil-process.ts'
import { listensOn } from '../../src/port-probe.ts'

const CHAIN_ID = 31337
let impostor: Server | undefined

afterEach(async () => {
  await new Promise((done) => (impostor ? impostor.close(done) : done(undefined)))
  impostor = undefined
})

/** A server on a loopback port that answers every request 200 with `body`. */
async function startImpostor(body: string): Promise<number> {
  impostor = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body))
  return new Promise((done) =>
    impostor!.listen(0, '127.0.0.1', () => done((impostor!.address() as AddressInfo).port)),
  )
}

describe('anvil on a port another server holds', () => {
  it('an HTTP server answering 200 is not taken for the chain', async () => {
    const port = await startImpostor('{"ok":true}')
    await expect(spawnAnvil({ chainId: CHAIN_ID, port, accounts: 2 })).rejects.toThrow(/did not start/)
  })

  it('a server answering our chain id is not taken for it either: the socket must be anvil’s', async () => {
    if (listensOn(process.pid, 1) === null) return // not Linux: the OS does not tell whose socket it is
    const port = await startImpostor(`{"jsonrpc":"2.0","id":1,"result":"0x${CHAIN_ID.toString(16)}"}`)
    await expect(spawnAnvil({ chainId: CHAIN_ID, port, accounts: 2 })).rejects.toThrow(/did not start/)
  })

  it('its own anvil is: the socket is the child’s, and the chain id ours', async () => {
    const anvil = await spawnAnvil({ chainId: CHAIN_ID, accounts: 2 })
    try {
      expect(listensOn(anvil.pid, anvil.port)).toBe(true)
      expect(listensOn(process.pid, anvil.port)).toBe(false)
    } finally {
      await anvil.stop()
    }
  })
})
