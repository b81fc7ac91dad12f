// `npm run deploy:batcher`: puts this build's AuthorizationBatcher (x402 settlement, many authorizations per
// transaction) on the configured chain, at its CREATE2 address, sent from the treasury key. Once per chain:
// the contract has no owner and holds nothing, so whoever deploys it, every tollgate on that chain finds it
// by its code. Without it, settlement sends one transaction per authorization. Exit codes: 0 = there (now or
// already), 1 = cannot be deployed here (no deterministic deployment proxy, or the deployment failed),
// 2 = could not try (configuration, RPC). With --upto: the treasury's UptoSettlementBatcher instead (x402
// upto, many permits per transaction; one address per treasury, only the treasury and the delegates it names
// may settle through it), and the settler slots (settlement.before_answer.slots) named its delegates, so
// they settle upto before the answer.
import { parseArgs } from 'node:util'
import { privateKeyToAccount } from 'viem/accounts'
import { connectChain, treasuryPrivateKey } from '../chain/connect.ts'
import { DETERMINISTIC_DEPLOYER } from '../chain/create2.ts'
import { AUTHORIZATION_BATCHER_ADDRESS, deployAuthorizationBatcher } from '../chain/settle-batch.ts'
import { settlerSlotKey } from '../chain/settler-keys.ts'
import { delegateUptoSettlers, deployUptoBatcher, uptoBatcherAddress } from '../chain/upto-settle.ts'
import { ConfigError, loadConfig } from '../config/load.ts'
import type { Config } from '../config/schema.ts'
import { envWithDevChain, readDevChainFile } from './dev-chain-file.ts'
import { isMain } from './is-main.ts'

const USAGE = `usage: npm run deploy:batcher [-- --upto]

deploys the AuthorizationBatcher (x402 settlement, many authorizations per transaction) at its CREATE2 address
from the treasury key, unless it is there already. Reads the configuration like npm start (NETWORK, RPC_URL,
TREASURY_PRIVATE_KEY, …). exit 0 there (now or already), 1 cannot be deployed on this chain, 2 could not try
  --upto  the treasury's UptoSettlementBatcher instead (x402 upto: the facilitator payers sign; restart
          tollgate afterwards so its 402 names it), and its settler slots named delegates
`

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: { help: { type: 'boolean', short: 'h' }, upto: { type: 'boolean' } },
  })
  if (values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  const running = readDevChainFile()
  const config = loadConfig({ env: envWithDevChain(running) })
  const chain = await connectChain(config)
  try {
    const treasury = chain.walletClient.account.address
    const r = values.upto
      ? await deployUptoBatcher(chain.publicClient, chain.walletClient, treasury)
      : await deployAuthorizationBatcher(chain.publicClient, chain.walletClient)
    const at = values.upto
      ? `UptoSettlementBatcher ${uptoBatcherAddress(treasury)} (settler ${treasury}) on chain ${chain.chainId}`
      : `AuthorizationBatcher ${AUTHORIZATION_BATCHER_ADDRESS} on chain ${chain.chainId}`
    switch (r.status) {
      case 'present':
        process.stdout.write(`${at}: already deployed\n`)
        return values.upto ? nameDelegates(config, chain) : 0
      case 'deployed':
        process.stdout.write(`${at}: deployed in ${r.tx}\n`)
        return values.upto ? nameDelegates(config, chain) : 0
      case 'no_deployer':
        process.stderr.write(
          `${at}: this chain has no deterministic deployment proxy at ${DETERMINISTIC_DEPLOYER}; settlement sends one transaction per ${values.upto ? 'permit' : 'authorization'}\n`,
        )
        return 1
      case 'failed':
        process.stderr.write(`${at}: deployment ${r.tx} did not leave the expected code\n`)
        return 1
    }
  } finally {
    await chain.close()
  }
}

/** The settler slots' addresses (as the data plane derives their keys), named delegates of the batcher. */
async function nameDelegates(
  config: Config,
  chain: Awaited<ReturnType<typeof connectChain>>,
): Promise<number> {
  const settlerKey = config.secrets.settler_private_key ?? null
  const seed = {
    settlerKey,
    treasuryKey: settlerKey === null ? treasuryPrivateKey(config, chain.devChain) : null,
  }
  const accounts: `0x${string}`[] = []
  for (let i = 0; i < config.settlement.before_answer.slots; i++) {
    const key = settlerSlotKey(seed, i)
    if (key !== null) accounts.push(privateKeyToAccount(key).address)
  }
  const r = await delegateUptoSettlers(chain.publicClient, chain.walletClient, accounts)
  process.stdout.write(
    r.tx === null
      ? `settler slots: all ${accounts.length} already delegates\n`
      : `settler slots: ${r.named} of ${accounts.length} named delegates in ${r.tx}\n`,
  )
  return 0
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(
        err?.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION'
          ? `${err.message}\n${USAGE}`
          : `deploy:batcher: ${err instanceof ConfigError ? err.message : (err?.stack ?? String(err))}\n`,
      )
      process.exit(2)
    },
  )
}
