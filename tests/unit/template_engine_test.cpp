// tessera tests: the Jinja2 engine against Python's Jinja2 (tests/tools/jinja_reference.py) on a
// table of small templates covering syntax, whitespace control, expressions, filters, tests,
// methods, loops, macros and undefined semantics; plus syntax errors, raise_exception and limits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/template/jinja.h"

namespace tessera::testing {
nlohmann::ordered_json RenderWithReference(const nlohmann::ordered_json& cases, const std::string& tag);
}

namespace tessera {
namespace {

using nlohmann::ordered_json;

const char* kContext = R"({
  "s": "Hello World", "u8": "héllo wörld ÉCOLE", "n": 7, "neg": -3, "f": 2.5, "t": true, "z": 0,
  "nothing": null, "e": "", "l": [3, 1, 2], "names": ["b", "A", "c", "a", "b"],
  "d": {"b": 1, "a": 2, "c": {"x": [1, 2]}},
  "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
           {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": "é\"\n"}}}]},
           {"role": "user", "content": "<think>\nx\n</think>\n\nrest"}],
  "users": [{"name": "bob", "age": 30, "admin": true}, {"name": "al", "age": 25, "admin": false},
            {"name": "cy", "age": 35}],
  "nested": [[1, 2], [3, 4]], "ws": "  \n pad \t ", "fl": [1.5, 2.0, 1e20, 1e-7, 0.1]
})";

struct Case {
  const char* name;
  const char* tpl;
  bool sandbox = true;
};

const Case kCases[] = {
    // --- text, comments, raw, whitespace control ---
    {"plain", "just text"},
    {"trailing_newline", "a\n"},
    {"two_trailing_newlines", "a\n\n"},
    {"crlf", "a\r\nb\r\n{% if t %}\r\nc{% endif %}"},
    {"comment", "a{# hidden #}b"},
    {"comment_trim", "a\n{# c #}\nb"},
    {"comment_dash", "a  {#- c -#}  b"},
    {"raw", "{% raw %}{{ x }}{% if %}{% endraw %}"},
    {"raw_ws", "a\n  {% raw %}\n{{x}}\n  {% endraw %}\nb"},
    {"raw_dash", "a  {%- raw -%}  x  {%- endraw -%}  b"},
    {"trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter"},
    {"lstrip_blocks", "x\n    {% if t %}\n    in\n    {% endif %}\ny"},
    {"lstrip_not_var", "x\n    {{ n }}\ny"},
    {"lstrip_start", "   {% if t %}A{% endif %}"},
    {"lstrip_midline", "a  {% if t %}x{% endif %}  b"},
    {"dash_both", "a  \n {%- if t -%} \n x \n {%- endif -%} \n b"},
    {"var_dash", "a \n {{- n -}} \n b"},
    {"plus_lstrip", "a\n  {%+ if t %}x{% endif %}"},
    {"plus_trim", "{% if t +%}\nx{% endif %}"},
    {"indented_for", "<ul>\n  {% for x in l %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>"},
    // --- literals and printing ---
    {"ints", "{{ 1 }} {{ -2 }} {{ 1_000 }} {{ 0 }}"},
    {"floats", "{{ 1.0 }} {{ 2.50 }} {{ 1e3 }} {{ 1.5e-7 }} {{ 1e16 }} {{ 123456789012345.6 }} {{ 0.1 + 0.2 }}"},
    {"float_ctx", "{% for x in fl %}{{ x }};{% endfor %}"},
    {"bools_none", "{{ true }} {{ false }} {{ True }} {{ none }} {{ None }} {{ nothing }}"},
    {"strings", R"({{ 'a\'b' }} {{ "c\"d" }} {{ 'tab\there' }} {{ 'nl\nx' }} {{ '\u00e9\x41' }} {{ 'a' 'b' }} {{ '\d' }})"},
    {"list_repr", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}"},
    {"dict_repr", "{{ {'a': 1, 'b': 'x\\'y', 3: none} }} {{ d }}"},
    {"tuple_repr", "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ 1, 2 }}"},
    {"str_repr_quotes", R"({{ ["it's", 'say "hi"', 'both \' "', 'nl\n', 'é'] }})"},
    {"ctx_repr", "{{ msgs[2] }}"},
    // --- access ---
    {"attr_item", "{{ d.a }} {{ d['b'] }} {{ d.c.x[1] }} {{ msgs[1].content }} {{ msgs[-1]['role'] }}"},
    {"missing_attr", "[{{ d.zz }}][{{ l[10] }}][{{ s.nope }}][{{ nothing.x }}]"},
    {"str_index", "{{ s[0] }}{{ s[-1] }} {{ u8[1] }}"},
    {"slices", "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:] }} {{ l[1:0] }}"},
    {"str_slices", "{{ s[::-1] }} {{ s[2:5] }} {{ u8[:3] }} {{ u8[::-2] }} {{ s[-3::-3] }}"},
    {"msgs_reverse", "{% for m in msgs[::-1] %}{{ m.role }},{% endfor %}"},
    {"dot_number", "{{ nested.0.1 }} {{ l.1 }}"},
    {"dict_method_vs_key", "{{ {'items': 1}.items()|list }} {{ {'items': 1}['items'] }}"},
    // --- arithmetic and operators ---
    {"arith", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"},
    {"arith_float", "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ f * 2 }} {{ f + n }} {{ 1 / 4 }} {{ 6 / 3 }}"},
    {"bool_arith", "{{ true + 1 }} {{ t * 3 }}"},
    {"pow_left_assoc", "{{ 2 ** 3 ** 2 }}"},
    {"unary", "{{ -n }} {{ +n }} {{ -f }} {{ - -n }} {{ not t }} {{ not z }}"},
    {"concat", "{{ 'a' ~ 1 ~ none ~ true ~ undefined_var ~ 1.0 }}"},
    {"str_plus", "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 'ab' * 3 }} {{ [0] * 3 }}"},
    {"percent_format", "{{ '%s-%d' % ('a', 3) }} {{ '%s' % 'b' }} {{ '%05.2f|%x' % (3.14159, 255) }} {{ '100%%' % () }}"},
    {"compare", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ [1,2] == [1,2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"},
    {"compare_mixed_eq", "{{ 1 == '1' }} {{ none == none }} {{ d == {'b': 1, 'a': 2, 'c': {'x': [1, 2]}} }} {{ true == 1 }}"},
    {"in_ops", "{{ 'ell' in s }} {{ 2 in l }} {{ 5 not in l }} {{ 'a' in d }} {{ 'zz' in d }} {{ not 'x' in s }}"},
    {"and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ e or nothing or 'last' }} {{ z and 1 }}"},
    {"condexpr", "{{ 'y' if t else 'n' }} {{ 'y' if z else 'n' }} [{{ 'y' if z }}] {{ 1 if z else 2 if t else 3 }}"},
    {"precedence_test", "{{ 1 + 2 is odd }} {{ not n is odd }} {{ -2|abs }} {{ 'a' ~ 1 + 2 }}"},
    // --- if / for ---
    {"if_elif_else", "{% for x in [0, 1, 2, 3] %}{% if x == 0 %}z{% elif x == 1 %}o{% elif x == 2 %}t{% else %}m{% endif %}{% endfor %}"},
    {"for_loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"},
    {"for_prev_next", "{% for x in l %}[{{ loop.previtem }}/{{ loop.nextitem }}]{% endfor %}"},
    {"for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in l %}{{ x }}{% else %}no{% endfor %}"},
    {"for_filter", "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}{{ loop.length }}{{ loop.last }},{% endfor %}"},
    {"for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"},
    {"for_unpack_paren", "{% for (a, b) in nested %}{{ a + b }},{% endfor %}"},
    {"for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}"},
    {"for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}"},
    {"for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"},
    {"for_nested_loop", "{% for a in nested %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}/{{ loop.index }} {% endfor %}"},
    {"for_cycle", "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}"},
    {"for_undefined", "{% for x in nope %}x{% else %}none{% endfor %}"},
    {"for_scope", "{% set y = 1 %}{% for x in l %}{{ y }}{% set y = x %}{{ y }}{% endfor %}|{{ y }}"},
    {"for_scope_iter_reset", "{% for x in l %}{% if loop.first %}{% set q = 5 %}{% endif %}[{{ q }}]{% endfor %}"},
    {"if_scope_leaks", "{% if t %}{% set y = 3 %}{% endif %}{{ y }}"},
    {"range_forms", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}"},
    // --- set, namespace ---
    {"set_basic", "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}"},
    {"set_block", "{% set x %}inner {{ n }}{% endset %}[{{ x }}]"},
    {"set_block_filter", "{% set x | upper %}abc{% endset %}{{ x }}"},
    {"namespace", "{% set ns = namespace(count=0, found=false) %}{% for x in l %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }} {{ ns.found }}"},
    {"namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"},
    {"dict_global", "{{ dict(a=1, b='x') }}"},
    // --- macros, call ---
    {"macro", "{% macro greet(name, greeting='Hi') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('bob') }} {{ greet('al', 'Yo') }} {{ greet(greeting='Hey', name='cy') }}"},
    {"macro_recursive", "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"},
    {"macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}"},
    {"macro_scope", "{% set g = 'global' %}{% macro m() %}{{ g }}{% set g = 'local' %}{{ g }}{% endmacro %}{{ m() }}{{ g }}"},
    {"call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ n }}{% endcall %}"},
    {"call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each(l) %}[{{ x }}]{% endcall %}"},
    {"filter_block", "{% filter upper %}hello {{ s }}{% endfilter %}"},
    {"generation_block", "a{% generation %}gen {{ n }}{% endgeneration %}b"},
    // --- tests ---
    {"tests_defined", "{{ s is defined }} {{ nope is defined }} {{ nope is undefined }} {{ d.zz is defined }} {{ nothing is defined }}"},
    {"tests_types", "{{ s is string }} {{ n is number }} {{ f is number }} {{ t is number }} {{ n is integer }} {{ t is integer }} {{ f is float }} {{ n is float }}"},
    {"tests_types2", "{{ d is mapping }} {{ l is mapping }} {{ l is iterable }} {{ s is iterable }} {{ n is iterable }} {{ l is sequence }} {{ d is sequence }} {{ n is sequence }}"},
    {"tests_bool_none", "{{ t is boolean }} {{ z is boolean }} {{ t is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ nothing is none }} {{ z is none }} {{ nothing is not none }}"},
    {"tests_num", "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ z is even }}"},
    {"tests_cmp", "{{ n is eq 7 }} {{ n is equalto 7 }} {{ n is ne 7 }} {{ n is lt 8 }} {{ n is gt 8 }} {{ n is le 7 }} {{ n is ge 8 }} {{ n is sameas 7 }} {{ 2 is in l }}"},
    {"tests_case", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ s is callable }} {{ range is callable }}"},
    {"tests_undefined_ops", "{{ nope is string }} {{ nope is none }} {{ nope is mapping }} {{ nope is iterable }}"},
    // --- filters ---
    {"f_tojson", "{{ d|tojson }} {{ msgs[2]|tojson }} {{ [1, 2.0, none, true, 'é\\t<>&\\''] | tojson }}"},
    {"f_tojson_indent", "{{ d|tojson(indent=2) }}\n{{ [] | tojson(indent=2) }} {{ {} | tojson(indent=4) }} {{ [[]]|tojson(indent=1) }}"},
    {"f_tojson_kwargs", "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ l|tojson(indent='\\t') }}"},
    {"f_tojson_scalars", "{{ 'a\"b\\\\c\\u0001'|tojson }} {{ 1.0|tojson }} {{ 1e20|tojson }} {{ n|tojson }} {{ nothing|tojson }}"},
    {"f_trim", "[{{ ws|trim }}] [{{ '  x  '|trim }}] [{{ 'xxaxx'|trim('x') }}]"},
    {"f_case", "{{ s|upper }} {{ s|lower }} {{ 'hello world'|capitalize }} {{ \"they're bob's-friend (ok)\"|title }} {{ u8|upper }} {{ u8|lower }}"},
    {"f_length", "{{ s|length }} {{ u8|length }} {{ l|length }} {{ d|count }} {{ nope|length }}"},
    {"f_first_last", "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} [{{ []|first }}]"},
    {"f_join", "{{ l|join }} {{ l|join(', ') }} {{ users|join('/', attribute='name') }} {{ names|join('') }}"},
    {"f_default", "{{ nope|default('dflt') }} {{ s|default('x') }} [{{ e|default('empty') }}] {{ e|default('empty', true) }} {{ nope|d('d') }} {{ nothing|default('x') }}"},
    {"f_replace", "{{ s|replace('l', 'L') }} {{ s|replace('l', 'L', 2) }} {{ 'aaa'|replace('', '-') }}"},
    {"f_string", "{{ n|string }} {{ l|string }} {{ (n|string) + 'x' }} {{ nothing|string }}"},
    {"f_int_float", "{{ '42'|int }} {{ ' 7 '|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ n|float }} {{ t|int }} {{ '0x1A'|int(0, 16) }}"},
    {"f_list", "{{ 'abc'|list }} {{ d|list }} {{ l|list }}"},
    {"f_items_dictsort", "{{ d|items|list }} {{ d|dictsort }} {{ {'b': 2, 'A': 3, 'a': 1}|dictsort }} {{ {'b': 2, 'a': 1}|dictsort(by='value', reverse=true) }}"},
    {"f_map", "{{ users|map(attribute='name')|list }} {{ names|map('upper')|list }} {{ users|map(attribute='admin', default='?')|list }} {{ ['1', '2']|map('int')|sum }}"},
    {"f_select", "{{ [0, 1, 2, 3, none, '']|select|list }} {{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ l|select('gt', 1)|list }} {{ l|select('in', [1, 3])|list }}"},
    {"f_selectattr", "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|list }} {{ users|selectattr('age', 'gt', 28)|map(attribute='name')|join(',') }} {{ users|selectattr('admin', 'defined')|list|length }} {{ msgs|selectattr('role', 'equalto', 'user')|list|length }}"},
    {"f_unique", "{{ names|unique|list }} {{ names|unique(case_sensitive=true)|list }} {{ users|unique(attribute='admin')|map(attribute='name')|list }}"},
    {"f_reverse", "{{ s|reverse }} {{ l|reverse|list }} {% for x in l|reverse %}{{ x }}{% endfor %}"},
    {"f_sort", "{{ l|sort }} {{ l|sort(reverse=true) }} {{ names|sort }} {{ names|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|list }}"},
    {"f_round_abs", "{{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }} {{ neg|abs }} {{ -2.5|abs }} {{ 7|round }}"},
    {"f_min_max_sum", "{{ l|min }} {{ l|max }} {{ l|sum }} {{ users|sum(attribute='age') }} {{ names|max }} {{ users|max(attribute='age') }} {{ fl|sum }}"},
    {"f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(first=true, blank=true) }}|{{ 'x\\n'|indent('>') }}"},
    {"f_escape_safe", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape }} {{ '<b>'|safe }}"},
    {"f_wordcount", "{{ 'hello big   world, ok'|wordcount }} {{ ''|wordcount }}"},
    {"f_batch", "{{ range(7)|batch(3)|list }} {{ range(4)|batch(3, 'x')|list }}"},
    {"f_chain", "{{ s|lower|replace('o', '0')|upper|length }} {{ msgs|map(attribute='role')|unique|list|length }}"},
    {"f_attr_format", "{{ d|attr('a') }} {{ '%s=%s'|format('k', 3) }}"},
    // --- string methods ---
    {"m_strip", "[{{ ws.strip() }}] [{{ ws.lstrip() }}] [{{ ws.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\nhi\\n'.lstrip('\\n') }}] [{{ 'abcba'.rstrip('ab') }}]"},
    {"m_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c d'.split(' ', 1) }} {{ 'a b c d'.split(maxsplit=2) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split(',') }} {{ ''.split() }}"},
    {"m_think_split", "{% set c = msgs[3].content %}[{{ c.split('</think>')[-1].lstrip('\\n') }}] [{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]"},
    {"m_starts_ends", "{{ s.startswith('He') }} {{ s.startswith('he') }} {{ s.endswith('ld') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith(('a', 'b')) }}"},
    {"m_replace_find", "{{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ u8.find('w') }} {{ s.count('l') }} {{ s.index('W') }}"},
    {"m_case", "{{ s.upper() }} {{ s.lower() }} {{ \"they're ok\".title() }} {{ 'hELLO'.capitalize() }} {{ 'aB'.swapcase() }}"},
    {"m_is", "{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' \\t'.isspace() }} {{ ''.isdigit() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }}"},
    {"m_join_lines", "{{ '-'.join(names) }} {{ ', '.join(['x', 'y']) }} {{ 'a\\nb\\r\\nc\\n'.splitlines() }} {{ 'a\\nb'.splitlines(true) }}"},
    {"m_format", "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='bob') }} {{ '{{lit}}'.format() }}"},
    {"m_dict", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }}"},
    {"m_list", "{{ l.index(1) }} {{ names.count('b') }}"},
    {"m_list_append", "{% set acc = [] %}{% for x in l %}{% set _ = acc.append(x * 2) %}{% endfor %}{{ acc }}{% set _ = acc.extend([9]) %}{{ acc }}", false},
    // --- undefined semantics ---
    {"undef_print", "[{{ nope }}] [{{ d.zz }}] [{{ nope|upper }}] [{{ nope|trim }}] [{{ nope|string }}]"},
    {"undef_truth", "{% if nope %}y{% else %}n{% endif %}{% if not nope %}!{% endif %}{{ nope == nope }}{{ 'a' in nope }}"},
    {"undef_and_or", "{{ nope or 'fallback' }} [{{ nope and 'x' }}]"},
    {"undef_attr_error", "{{ nope.attr }}"},
    {"undef_item_error", "{{ nope[0] }}"},
    {"undef_arith_error", "{{ nope + 1 }}"},
    {"undef_call_error", "{{ nope() }}"},
    {"undef_defined_chain_error", "{{ nope.x is defined }}"},
    {"undef_tojson_error", "{{ nope|tojson }}"},
    {"undef_compare_error", "{{ nope < 1 }}"},
    // --- runtime errors that must also be errors for us ---
    {"err_type_add", "{{ 'a' + 1 }}"},
    {"err_div_zero", "{{ 1 / 0 }}"},
    {"err_mod_zero", "{{ 1 % 0 }}"},
    {"err_compare", "{{ 'a' < 1 }}"},
    {"err_not_callable", "{{ n() }}"},
    {"err_iter_int", "{% for x in n %}{% endfor %}"},
    {"err_in_int", "{{ 1 in n }}"},
    {"err_unknown_filter", "{{ s|nofilter }}"},
    {"err_unknown_test", "{{ s is notatest }}"},
    {"err_unpack", "{% for a, b in l %}{% endfor %}"},
    {"err_set_attr_non_ns", "{% set d.x = 1 %}"},
    {"err_raise", "{{ raise_exception('Only user and assistant roles are supported!') }}"},
    {"err_raise_in_loop", "{% for m in msgs %}{% if m.role == 'assistant' %}{{ raise_exception('bad role ' ~ m.role) }}{% endif %}{% endfor %}"},
    {"err_range_too_big", "{{ range(200000)|length }}"},
    // --- HF chat-template idioms ---
    {"hf_system_split", "{% if msgs[0]['role'] == 'system' %}{% set sys = msgs[0]['content'] %}{% set rest = msgs[1:] %}{% else %}{% set rest = msgs %}{% endif %}{{ sys }}|{{ rest|length }}"},
    {"hf_tool_args", "{% for tc in msgs[2].tool_calls %}{% set tc = tc.function if tc.function else tc %}{{ tc.name }}:{% if tc.arguments is string %}{{ tc.arguments }}{% else %}{{ tc.arguments|tojson }}{% endif %}{% endfor %}"},
    {"hf_last_query", "{% set ns = namespace(idx=msgs|length - 1) %}{% for m in msgs[::-1] %}{% set i = (msgs|length - 1) - loop.index0 %}{% if m.role == 'user' %}{% set ns.idx = i %}{% endif %}{% endfor %}{{ ns.idx }}"},
    {"hf_items_loop", "{% for name, p in {'city': {'type': 'string'}, 'n': {'type': 'int'}}.items() %}{{ name }}:{{ p.type }}{% if not loop.last %}, {% endif %}{% endfor %}"},
    {"hf_content_list", "{% set c = [{'type': 'text', 'text': 'a'}, {'type': 'image'}, {'type': 'text', 'text': 'b'}] %}{% for p in c %}{% if p.type == 'text' %}{{ p.text }}{% elif p['type'] == 'image' %}<img>{% endif %}{% endfor %}"},
    {"hf_strftime", "{{ strftime_now('%Y')|length }}"},
    // --- idioms of Qwen3-Coder / Qwen3.5 / gpt-oss templates (written for this table) ---
    {"coder_extra_keys", "{% macro render_extra_keys(json_dict, handled_keys) %}{%- if json_dict is mapping %}{%- for json_key in json_dict if json_key not in handled_keys %}{%- if json_dict[json_key] is mapping or (json_dict[json_key] is sequence and json_dict[json_key] is not string) %}{{- '\n<' ~ json_key ~ '>' ~ (json_dict[json_key] | tojson | safe) ~ '</' ~ json_key ~ '>' }}{%- else %}{{- '\n<' ~ json_key ~ '>' ~ (json_dict[json_key] | string) ~ '</' ~ json_key ~ '>' }}{%- endif %}{%- endfor %}{%- endif %}{% endmacro %}{{ render_extra_keys({'type': 'object', 'required': ['a'], 'additionalProperties': true, 'n': none, 'x': {'k': 1}}, ['type']) }}"},
    {"coder_params", "{%- for param_name, param_fields in {'city': {'type': 'string', 'description': ' The city \n'}, 'days': {'type': ['integer', 'null']}}|items %}\n<parameter>\n<name>{{ param_name }}</name>\n{%- if param_fields.type is defined %}\n<type>{{ param_fields.type | string }}</type>\n{%- endif %}\n{%- if param_fields.description is defined %}\n<description>{{ param_fields.description | trim }}</description>\n{%- endif %}\n</parameter>\n{%- endfor %}"},
    {"qwen35_content_parts", "{%- macro render_content(content) %}{%- if content is string %}{{- content }}{%- elif content is iterable and content is not mapping %}{%- for item in content %}{%- if 'image' in item or 'image_url' in item or item.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{%- elif 'text' in item %}{{- item.text }}{%- else %}{{- raise_exception('Unexpected item type in content.') }}{%- endif %}{%- endfor %}{%- elif content is none or content is undefined %}{%- else %}{{- raise_exception('Unexpected content type.') }}{%- endif %}{%- endmacro %}[{{ render_content('plain') }}][{{ render_content([{'type': 'text', 'text': 'a'}, {'type': 'image', 'image': 'x'}, {'text': 'b'}]) }}][{{ render_content(none) }}][{{ render_content(nope) }}]"},
    {"qwen35_content_raise", "{%- set content = [{'type': 'audio'}] %}{%- for item in content %}{%- if 'text' in item %}{{ item.text }}{%- else %}{{- raise_exception('Unexpected item type in content.') }}{%- endif %}{%- endfor %}"},
    {"gptoss_ts_type", "{%- macro ts_type(spec, required, is_nullable=false) -%}{%- if spec.type == 'array' -%}{{- ts_type(spec['items'], required) }}[]{%- elif spec.type == 'string' -%}{%- if spec.enum -%}{{- '\"' ~ spec.enum|join('\" | \"') ~ '\"' }}{%- else -%}string{%- endif -%}{%- elif spec.type is not string and spec.type is iterable -%}{{- spec.type|join(' | ') }}{%- elif spec.oneOf -%}{%- for v in spec.oneOf -%}{{- ts_type(v, required) }}{%- if not loop.last %} | {% endif -%}{%- endfor -%}{%- elif spec.type == 'object' -%}{\n{%- for k, v in spec.properties.items() %}\n{{ k }}{{ '?' if k not in required else '' }}: {{ ts_type(v, v.required or []) }},\n{%- endfor %}\n}{%- else -%}any{%- endif -%}{%- if is_nullable %} | null{% endif -%}{%- endmacro -%}{{ ts_type({'type': 'object', 'properties': {'a': {'type': 'string', 'enum': ['x', 'y']}, 'b': {'type': 'array', 'items': {'type': 'number'}}, 'c': {'oneOf': [{'type': 'string'}, {'type': 'object', 'properties': {}}]}, 'd': {'type': ['string', 'null']}}}, ['a'], true) }}"},
    {"gptoss_dev_role", "{%- if msgs[0].role in ['system', 'developer'] %}{%- set first = msgs[0].content %}{%- set loop_messages = msgs[1:] %}{%- endif %}{{ first }}:{{ loop_messages|map(attribute='role')|join(',') }}:{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|first }}:{{ msgs[2].tool_calls|length }}:{{ (msgs[2].tool_calls[0].function.arguments|tojson) }}"},
    {"outer_loop_saved", "{% for a in nested %}{% set outer = loop %}{% for b in a %}{{ outer.index }}.{{ loop.index }}={{ b }} {% endfor %}{% endfor %}"},
    {"multiline_tags", "{{\n  'a'\n  ~ 'b'\n}}{%\n  if t\n%}\nyes{% endif %}"},
    {"braces_in_text_and_dicts", "a { b } c {{ {'a': {'b': 1}}}} {{ {'x': [1, {'y': 2}]}['x'][1]['y'] }}"},
    {"tag_chars_in_strings", "{% set x = '%} {{ }} {#' %}[{{ x }}] {{ '}}' }}"},
    {"set_default_self", "{% set x = x | default(5) %}{{ x }} {% set s = s | default('no') %}{{ s }}"},
    {"tab_lstrip", "a\n\t \t{% if t %}\n\tb\n\t{% endif %}\nc"},
    {"comment_lstrip", "a\n    {# note #}\nb\n  {#- x #}  c"},
    {"var_no_trim", "{{ n }}\n{{ n }}\n"},
    {"nested_if_ws", "{%- for m in msgs %}\n    {%- if m.role == 'user' %}\n        {{- m.content }}\n    {%- elif m.role == 'assistant' %}\n        {{- '[' + m.content + ']' }}\n    {%- endif %}\n{%- endfor %}\n"},
    {"not_defined_forms", "{{ not nope is defined }} {{ nope is not defined }} {{ not (s is defined) }} {{ 'a' if nope is defined and nope else 'b' }}"},
    {"format_filter_float", "{{ '%.2f'|format(3.14159) }} {{ '%5s|%-5s|' % ('a', 'b') }} {{ '%r' % 'x' }}"},
    {"whitespace_only_template", "   \n  \n"},
    {"empty_template", ""},
    {"hf_is_not_none", "{% for m in msgs %}{{ m.content is not none and m.tool_calls is defined }}{% endfor %}"},
};

class TemplateReferenceTest : public ::testing::TestWithParam<size_t> {
 public:
  static const ordered_json& Reference() {
    static ordered_json ref = [] {
      ordered_json cases = ordered_json::array();
      for (const auto& c : kCases)
        cases.push_back({{"template", c.tpl}, {"context", ordered_json::parse(kContext)}, {"sandbox", c.sandbox}});
      return testing::RenderWithReference(cases, "engine-table");
    }();
    return ref;
  }
};

TEST_P(TemplateReferenceTest, MatchesPythonJinja2) {
  const Case& c = kCases[GetParam()];
  const ordered_json& ref = Reference();
  ASSERT_EQ(ref.size(), std::size(kCases)) << "reference renderer unavailable";
  const ordered_json& want = ref[GetParam()];
  std::string got, error;
  try {
    got = jinja::Template(c.tpl).Render(ordered_json::parse(kContext));
  } catch (const Error& e) {
    error = e.what();
  }
  if (want.contains("ok")) {
    EXPECT_EQ(error, "") << "template: " << c.tpl;
    EXPECT_EQ(got, want["ok"].get<std::string>()) << "template: " << c.tpl;
  } else {
    EXPECT_NE(error, "") << "Jinja2 raised " << want["error"] << " but we rendered: " << got
                         << "\ntemplate: " << c.tpl;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, TemplateReferenceTest, ::testing::Range<size_t>(0, std::size(kCases)),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(kCases[info.param].name);
                         });

// --- errors with a location, raise_exception, limits ---

std::string ErrorOf(const std::string& tpl, const ordered_json& ctx = ordered_json::object()) {
  try {
    jinja::Template t(tpl);
    t.Render(ctx);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << tpl;
  return "";
}

TEST(TemplateErrors, UnclosedTagNamesLineAndColumn) {
  std::string msg = ErrorOf("line one\nab {{ x ");
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column 4"), std::string::npos) << msg;
}

TEST(TemplateErrors, UnclosedBlockNamesMissingEnd) {
  std::string msg = ErrorOf("{% for x in y %}\n{{ x }}\n");
  EXPECT_NE(msg.find("endfor"), std::string::npos) << msg;
}

TEST(TemplateErrors, BadExpressionNamesLineAndColumn) {
  std::string msg = ErrorOf("ok\n\n  {{ 1 + * 2 }}");
  EXPECT_NE(msg.find("line 3, column 10"), std::string::npos) << msg;
}

TEST(TemplateErrors, MoreSyntaxErrors) {
  for (const char* bad : {"{% if x %}", "{% endif %}", "{{ }}", "{% bogus %}", "{{ 'unterminated }}", "{{ (1, 2 }}",
                          "{% for %}{% endfor %}", "{% set %}", "{{ a[ }}", "{# never closed", "{% raw %}x",
                          "{% break %}", "{{ x | }}", "{% macro m( %}{% endmacro %}", "{{ 1 ! 2 }}", "{{ ) }}"}) {
    std::string msg = ErrorOf(bad);
    EXPECT_NE(msg.find("line"), std::string::npos) << bad << " -> " << msg;
  }
}

TEST(TemplateErrors, RaiseExceptionMessagePropagatesUnchanged) {
  EXPECT_EQ(ErrorOf("{{ raise_exception('Conversation roles must alternate user/assistant') }}"),
            "Conversation roles must alternate user/assistant");
}

TEST(TemplateErrors, RuntimeErrorNamesLine) {
  std::string msg = ErrorOf("a\nb\n{{ 1 / 0 }}");
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
}

TEST(TemplateErrors, InfiniteMacroRecursionIsAnError) {
  std::string msg = ErrorOf("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(msg.find("recursion"), std::string::npos) << msg;
}

TEST(TemplateErrors, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(ErrorOf(deep).find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(ErrorOf(ifs).find("nested too deeply"), std::string::npos);
  std::string nots = "{{ " + std::string(0, ' ');
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_NE(ErrorOf(nots + "x }}").find("nested too deeply"), std::string::npos);
  // Long left-associative chains build tall trees without parser recursion: bounded too.
  std::string sum = "{{ 1", attrs = "{{ x", filters = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) sum += " + 1", attrs += ".a", filters += "|upper";
  EXPECT_NE(ErrorOf(sum + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(ErrorOf(attrs + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(ErrorOf(filters + " }}").find("nested too deeply"), std::string::npos);
  std::string ok = "{{ 0";
  for (int i = 0; i < 500; ++i) ok += " + 2";
  EXPECT_EQ(jinja::Template(ok + " }}").Render(ordered_json::object()), "1000");
}

TEST(TemplateErrors, OutputLimitStopsRunawayTemplates) {
  jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  jinja::Template t("{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}",
                    limits);
  try {
    t.Render(ordered_json::object());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
}

// Sizes and indices a template gives filters and methods: a huge indent width once allocated it
// (100 GB: the process ended), a format field of many digits left std::stoul's std::out_of_range,
// which no caller maps (a 500). Each is a tessera::Error now (fuzz/corpus/jinja/crash-huge-widths).
TEST(TemplateErrors, HugeWidthsAndIndicesAreErrors) {
  for (const char* src : {"{{ 'a\nb' | indent(99999999999) }}", "{{ [1] | tojson(indent=99999999999) }}",
                          "{{ '{99999999999999999999999}'.format(1) }}"}) {
    SCOPED_TRACE(src);
    jinja::Template t(src);
    EXPECT_THROW(t.Render(ordered_json::object()), Error);
  }
  EXPECT_EQ(jinja::Template("{{ 'a\nb' | indent(2) }}|{{ '{1}{0}'.format('x', 'y') }}").Render(ordered_json::object()),
            "a\n  b|yx");
}

// Mutated real-world templates and random bytes either render or throw tessera::Error; never crash.
TEST(TemplateErrors, MutatedTemplatesNeverCrash) {
  std::string base =
      "{%- set ns = namespace(n=0) %}{% macro m(x, y=2) %}{{ x ~ y }}{% endmacro %}"
      "{%- for message in messages[::-1] if message.role != 'tool' %}\n  {%- set ns.n = ns.n + 1 %}"
      "{{- m(message.content|trim, loop.index) }}{% if message.tool_calls %}{{ message.tool_calls|tojson(indent=2) }}"
      "{% elif 'x' in message.content %}{{ message.content.split('x')[-1].lstrip() }}{% else %}{{ raise_exception('r') "
      "}}{% endif %}{% endfor %}{# c #}{% raw %}{{ raw }}{% endraw %}{{ ns.n is odd }}{{ [1, 2][::-1] }}";
  ordered_json ctx = ordered_json::parse(
      R"({"messages": [{"role": "user", "content": " axb "}, {"role": "assistant", "content": "x",
          "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]}]})");
  const std::string alphabet = "{}%#-+()[]'\".|~,:=! \nxab01";
  uint32_t state = 12345;
  auto rnd = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % n;
  };
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = base;
    int edits = 1 + rnd(4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rnd(static_cast<uint32_t>(t.size()));
      switch (rnd(3)) {
        case 0: t.erase(pos, 1 + rnd(5)); break;
        case 1: t.insert(pos, 1, alphabet[rnd(static_cast<uint32_t>(alphabet.size()))]); break;
        default: t[pos] = alphabet[rnd(static_cast<uint32_t>(alphabet.size()))];
      }
    }
    if (iter % 10 == 0)
      for (char& c : t) c = static_cast<char>(rnd(256));  // raw noise too
    try {
      jinja::Template tpl(t);
      tpl.Render(ctx);
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

TEST(TemplateErrors, ContextMustBeAnObject) {
  jinja::Template t("x");
  EXPECT_THROW(t.Render(ordered_json::array()), Error);
  EXPECT_EQ(t.Render(ordered_json()), "x");
}

}  // namespace
}  // namespace tessera
