/* The host side of the plugin ABI: the services table handed to every plugin, and the config view
 * (biaskit_config) through which a plugin reads its options from one [[term]] table. */
#ifndef BK_PLUGIN_SERVICES_H
#define BK_PLUGIN_SERVICES_H

#include "config/toml.h"
#include "util/error.h"

#include <biaskit/plugin.h>

struct biaskit_config {
    const biaskit_plugin *desc;  /* whose options these are */
    const bk_toml_node *table;   /* the [[term]] table, or NULL: every option at its default */
    bk_toml_pos pos;             /* where the table starts (for messages about unset keys) */
    char label[96];              /* "[[term]] #2 (alibi)" */
};

/* The one services table of this engine. */
const biaskit_services *bk_services(void);

/* Bind a config view to a term table (NULL: defaults only) after checking every key of the table
 * that is not an engine term key against the plugin's declared options: unknown key (with a
 * suggestion and the list of options), wrong type, string not among the choices, each reported with
 * the position of the offending key or value. */
int bk_config_view_init(biaskit_config *view, const biaskit_plugin *desc, const bk_toml_node *table,
                        bk_toml_pos pos, const char *label, bk_error *err);

/* The value of option `o` as the view resolves it, as TOML text in buf[size]: the file's value
 * (*is_set = 1), else the declared default (*is_set = 0; an array's is []). */
void bk_config_option_text(const biaskit_config *view, const biaskit_option *o, char *buf, size_t size, int *is_set);

/* Minimum level of log lines shown (BIASKIT_LOG_*); default BIASKIT_LOG_INFO. */
void bk_set_log_level(int level);

#endif
