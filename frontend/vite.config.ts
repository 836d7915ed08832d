import vue from '@vitejs/plugin-vue'
import { defineConfig } from 'vite'

/** The gateway the dev server forwards `/api` to (`make up` serves it here). */
const GATEWAY = process.env.KS_GATEWAY_URL ?? 'http://127.0.0.1:8780'

export default defineConfig({
  // The gateway serves the built app under /ui/ (services/gateway/…/api/web.py).
  base: '/ui/',
  plugins: [vue()],
  define: {
    // Vue's and vue-i18n's compile-time flags: no devtools hooks or legacy API in the bundle.
    __VUE_PROD_DEVTOOLS__: 'false',
    __VUE_PROD_HYDRATION_MISMATCH_DETAILS__: 'false',
    __VUE_I18N_LEGACY_API__: 'false',
    __VUE_I18N_FULL_INSTALL__: 'false',
    __INTLIFY_PROD_DEVTOOLS__: 'false',
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Every asset a file of its own: the Content-Security-Policy allows no data: URLs for scripts or fonts.
    assetsInlineLimit: 0,
    sourcemap: false,
  },
  server: {
    host: '127.0.0.1',
    port: 5173,
    strictPort: true,
    proxy: {
      '/api': {
        target: GATEWAY,
        changeOrigin: true,
        configure(proxy) {
          // The gateway refuses a state-changing request from a foreign Origin (api/browser.py); seen
          // through this proxy the page's origin is the dev server's, so it is given the gateway's own.
          proxy.on('proxyReq', (request) => {
            if (request.getHeader('origin')) request.setHeader('origin', new URL(GATEWAY).origin)
          })
        },
      },
    },
  },
})
