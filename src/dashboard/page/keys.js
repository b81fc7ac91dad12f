// API keys: roll (the new key is shown once; the dashboard signs in again with it).
import { api, onSubmit, state } from './api.js'
import { showSecret } from './dialogs.js'
import { $, when } from './dom.js'
import { signIn } from './session.js'

export async function loadKeys() {
  const a = state.account
  $('acct-id').textContent = a.id
  $('acct-wallet').textContent = a.wallet_address
  $('acct-network').textContent = `${a.network} (chain ${a.chain_id})`
  $('acct-session').textContent = when(state.expiresAt)
}

onSubmit('roll-form', async () => {
  const rolled = await api('/account/api-keys/roll', {
    method: 'POST',
    body: { grace_period_ms: Number($('roll-grace').value) },
  })
  // A session ends with the key it was opened with: continue on the new one.
  await signIn(rolled.api_key)
  showSecret(
    'Your new API key',
    `Previous keys stop working at ${when(rolled.previous_keys_expire_at)}. This is the only time the new key is shown.`,
    rolled.api_key,
  )
})
